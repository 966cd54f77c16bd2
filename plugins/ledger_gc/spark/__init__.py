"""ledger-gc's Spark jobs, one module each, over what ``session`` gives them all.

* ``session``: the session, job groups, task counts, errors, checkpoints;
* ``snapshot``: the metadata snapshot (managed ledgers read on executors);
* ``scan`` and ``inventory``: the storage scan (listing, or an S3 Inventory report);
* ``diff``: the store's objects against the snapshot; ``segment_diff``: the offload
  bucket's; ``snapshot_facts``: what the phases step needs of the snapshot;
* ``delete``: the re-check and delete over executors.

What the jobs run on executors (the S3 source's reads and deletes) is
``ledger_gc.s3_orphans``, below them; nothing here imports the orphan engine, whose
survey and delete steps start the jobs. A job takes DataFrames or plain inputs and
returns a result; it never reads or writes the state store. Its caller does
(``orphans.survey_steps`` around the survey's jobs, ``orphans.cycle``), so a job is
tested with rows in and a result out.
"""
