"""Fault injection: every way a run is stopped, damaged or starved ends exactly or in one ``error:`` line.

Each case ends with the final weights bitwise equal to an uninterrupted run's after a resume, or with
one ``error:`` line and the last good checkpoint intact; never a traceback, never a silently wrong
result.

- Stops: SIGKILL at a random moment (disk client state, ``test_checkpoint_every_round``) and during a
  save (memory client state, ``test_kill_during_save``); SIGTERM, SIGINT and SIGUSR1 at seeded rounds,
  during a save, twice, before training, and with 2 processes (``test_preemption``); a rank that dies
  (``test_dead_rank``); the experiment launcher's children and the launcher itself (``test_launcher``).
- Damage: checkpoints flipped, truncated, emptied, deleted or foreign (``test_checkpoint_errors``,
  ``test_checkpoint_io``); client-state files flipped, truncated, emptied, deleted, moved and copied
  (``test_client_state_files``); run markers and result files (``test_launcher``).
- Starvation: a file-size limit (``RLIMIT_FSIZE``), a full disk and read-only folders for every file a
  run writes (``test_write_failures``).
"""
