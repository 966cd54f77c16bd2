"""Pulsar's own metadata as a source of orphans: what deleted tenants, namespaces and
dead brokers leave in ZooKeeper (DESIGN.md "Pulsar's own metadata").

Above ``bookkeeper`` in the layers: its survey reads Pulsar's references once
(``bookkeeper.references``) and hands them to the BookKeeper source's survey in the same
cycle (``SurveyRequest.shared``), with the ledger ids its leftovers name.
"""
