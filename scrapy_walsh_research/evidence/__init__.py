"""What the bot did, kept so an operator can prove it: the audit log, the
purge of a site's data, the attestation and the evidence report."""
