"""What orders and times the requests: the Pacer (each host's interval over
its clock), what an answer signals (adaptive pacing), the per-host frontier
scheduler, how fast the list is read, and the download handler that stamps
when a request left. No gate lives here, and nothing here imports a gate: the
gates tell the Pacer what they would deny, and correctness stays with them.
"""
