"""Distributed-training plumbing: env, DNS and topology, as pure functions over pod groups.

Nothing here imports a kind module or does I/O; the policy values come in as arguments.
"""
