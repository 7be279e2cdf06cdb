"""State: what a federation holds between rounds and across resumes, and the data it trains on.

Client data as a few contiguous tensors with per-client offsets (``data``), the counter-based seeds that
make every random stream a function of its coordinates instead of generator state (``seeding``), flat
views of a model's state (``flat_state``), per-client rows in memory or on disk and the tables and
declared state built on them (``client_rows``, ``client_table``, ``client_state``, ``declared_state``,
``append_log``) and the records of the arguments an object was built with (``init_args``). It imports
only :mod:`lightning_fl.faults`.
"""
