"""The conformance check: the bundle crawls its own loopback sandbox and
judges what the origin saw against each rule of the contract."""
