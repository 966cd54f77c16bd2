"""ledger-gc's configuration: the settings, their forms and sources (environment, a
broker's broker.conf, Airflow), and the ZooKeeper addresses, TLS and SASL they name."""
