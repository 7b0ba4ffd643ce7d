"""The ledger: jobs, attempts and their transitions, enforced in one place."""
