# The image an Astronomer deployment builds from (`astro deploy`): Astro Runtime for
# Airflow 3.3, on Python 3.11 like bin/setup's venv. The runtime image installs, at build
# time, packages.txt (Debian packages: the Java runtime Spark's driver and local executors
# need; libkrb5-dev and gcc, which the `kerberos` package of ZooKeeper's SASL GSSAPI is
# built with, as it is published as source only) and then requirements.txt (pinned; tests/unit/test_deployment_files.py keeps the
# Airflow line of requirements.txt on this runtime's Airflow minor version), and copies
# dags/, plugins/ and include/. The state (registry, audit log, run summaries) is not in
# the image: set LEDGERGC_STATE_URL to the deployment's PostgreSQL (README, "Deploying").
FROM astrocrpublic.azurecr.io/runtime:3.3-2-python-3.11

# The library and its `ledgergc` command (editable: it stays the plugins/ folder Airflow
# loads, one copy of the code); spark_apps/ are the spark-submit entry points.
USER root
COPY --chown=astro:0 pyproject.toml README.md /usr/local/airflow/
COPY --chown=astro:0 spark_apps /usr/local/airflow/spark_apps
RUN pip install --no-cache-dir --no-deps -e /usr/local/airflow
USER astro
