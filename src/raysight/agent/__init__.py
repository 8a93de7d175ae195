"""What runs beside Ray on its nodes. The node agent (``node_agent.py``: `raysight agent`, inside `raysight run`, or
as Ray actors, ``on_ray.py``) ships its node's log files (``tailer.py``), reports its Ray processes running or gone
(``node_watch.py``), and scrapes the node's metrics (``metrics_scrape.py``, the session's parts it finds on disk in
``scrape.py``): Ray's, its aggregators' counts of what they exported among them, and what each Ray process uses of CPU,
memory and GPUs (``process_stats.py``). While `raysight run` runs a driver, its session's dashboard is polled for the
state Ray sends no events of (``state_poll.py``; `raysight poll` for a `ray start` cluster)."""
