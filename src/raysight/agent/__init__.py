"""What runs beside Ray on its nodes: for now, scraping Ray's aggregator metrics for `raysight run`."""
