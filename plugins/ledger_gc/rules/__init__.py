"""The rules that decide what is live, what is an orphan and what may be deleted (pure).

Every module under this folder is a pure function of its inputs: no ZooKeeper, S3,
Spark, Airflow, database or clock. That is what makes the rules testable one by one
against Pulsar's and BookKeeper's own, and it is checked: the purity contract in
``pyproject.toml`` names this folder, so a new file here is covered without a list to
keep. The subfolders mirror the packages that apply the rules (``orphans/`` applies
``rules/orphans/``).
"""
