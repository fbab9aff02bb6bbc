"""The web console (``odradek console``): a Kafka client application that shows and
changes a cluster through Kafka's public APIs only (Admin API, producer, consumer), so it
works against Apache Kafka and any Odradek cluster alike.

``kafka.py`` asks the cluster; ``app.py`` serves the pages (Starlette, Jinja2, htmx).
The broker never imports this package, and this package imports nothing of the broker's.
"""
