"""The log-processing pipeline on Spark: web activity and service metrics flowing through
topics into real-time aggregates and offline Parquet tables.

- `generator`: a seeded simulation of a web site's users (sessions of page views, clicks,
  searches and errors) and of the services behind it (one request record per backend call,
  with latencies and status codes), produced as JSON to the topics `activity` and
  `metrics`.
- `jobs`: the Spark side. A Structured Streaming job parses both topics, lands every
  activity event in a partitioned Parquet table (exactly once, through Spark's file sink
  and its checkpoint), and computes event-time windowed aggregates with watermarks (views
  per page per minute, error rate and latency percentiles per service, active users) that
  go to the topic `activity-stats` and to partitioned Parquet tables; a batch job
  (backfill) loads an offset or time range of a topic into the same tables.

The command `odradek pipeline run` wires them to a local broker and Spark in local mode.
This package talks to brokers over the network only (through `odradek.spark`), never
imports the broker, so the same jobs run against any Kafka-compatible cluster and on any
Spark master.
"""
