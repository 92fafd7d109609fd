"""Adapters that let other trainers (TRL, verl) score with rlvr's verifiers."""
