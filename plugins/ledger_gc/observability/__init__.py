"""What operators see of the GC: one overview of the state store, as a page and as metrics.

* ``state_reads``: the newest run summaries, and the audit log tallied incrementally
  (the log only grows; a page view must not re-read years of it);
* ``runs``: the one place that knows the keys of the trim and orphan run summaries
  (``pm_runs``: of their Pulsar-metadata part);
* ``overview``: ``build_overview`` - the dict behind the Airflow page, the JSON endpoint,
  the metrics and ``ledgergc status --json``'s ``overview`` section;
* ``metrics``: that dict in Prometheus' text format (KIP-370's metric names);
* ``charts``, ``timefmt``, ``figures`` and ``page``: the HTML page (inline SVG, no
  JavaScript, nothing fetched), with ``bookkeeper_section`` (the BookKeeper source's
  figures), ``pulsar_metadata_section`` (Pulsar's own metadata) and ``registered_table``
  (the registered orphans) as parts of it;
* ``live``: the ZooKeeper status behind the trim backlog, cached for the web server;
* ``status_section``: the ``ledgergc status`` extension (JSON section, plain lines).

Nothing here imports Airflow: the plugin module is a thin FastAPI shell over it. This
init imports nothing (the web server imports ``page``, the CLI ``metrics``, each on its
own).
"""
