"""Faults: the errors a run can meet and how it survives them, the lowest layer of the core.

The one-line errors every layer raises (``validation``: configuration errors, divergence, unreadable or
unwritable files, and the walker of an exception's cause chain), writes that fail without harming what
was written before (``write_failures``), checkpoints that are written atomically and checked on loading
(``checkpoint_io`` with the digest of ``state_digest``), preemption by the scheduler (``preemption``) and
a rank that dies in a multi-process run (``dead_rank``). It imports nothing else of the project.
"""
