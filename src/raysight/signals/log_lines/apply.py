"""Batches of log lines into the store: journalled batches applied a group at a time, each line once, and indexed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from raysight.signals.log_lines import log_index
from raysight.signals.log_lines.parse import (
    ACCESS,
    LINE_TIME,
    MAX_LOG_LINES,
    STAMPED_NS,
    parse,
    placed,
    read_lines,
    serve_requests_sql,
)
from raysight.store.schema import LAST_LOG_SEQ_SQL, LOG_SEQ_KEY
from raysight.store.tx import Tx

if TYPE_CHECKING:
    from raysight.store.store import Store


def apply_logs(store: Store, bodies: Sequence[bytes], journal_seq: int | None = None) -> int:
    """Store node agents' batches of log lines (``parse.py``) in one transaction: each line once, however often its
    batch was sent (a file's lines before what is stored of it are skipped), and the lines of files appended to (the
    OTLP receiver's) after what is stored of them, with the requests of Serve's access lines (``serve_requests``);
    the lines stored."""
    batches = [parse(body, MAX_LOG_LINES) for body in bodies]
    if appended := {b.files["file_key"][row] for b in batches for row, _, _ in b.appends}:
        ends = {
            (session, host, key): end
            for session, host, key, end in store.con.execute(
                "SELECT session, host, file_key, end_offset FROM log_files WHERE file_key IN (SELECT unnest(?))",
                [sorted(appended)],
            ).fetchall()
        }
        batches = [placed(batch, ends) for batch in batches]
    lines, files, gaps = (pa.concat_tables(tables) for tables in zip(*(batch.tables() for batch in batches)))
    lines = lines.append_column("ord", pa.array(range(lines.num_rows), pa.int64()))
    with store.folding(journal_seq) as tx:
        (first,) = tx.one(LAST_LOG_SEQ_SQL)
        # each line once: those of a file before what is stored of it, and a line sent twice in the group, are not
        new_lines = """SELECT l.* FROM staged_lines l LEFT JOIN log_files f USING (session, host, file_key)
                       WHERE l.byte_offset >= coalesce(f.end_offset, 0)
                       QUALIFY row_number() OVER (PARTITION BY session, host, file_key, byte_offset ORDER BY ord) = 1"""
        with tx.registered("staged_lines", lines):
            tx.run(
                f"""CREATE OR REPLACE TEMP TABLE lines_read AS
                    SELECT {first} + row_number() OVER (ORDER BY ord) AS seq,
                           * EXCLUDE (ord, read_ns, utc_offset_s, stamped, raw),
                           {LINE_TIME} AS ts_ns, from_base64(raw) AS raw
                    FROM ({read_lines(new_lines, also={"stamped": STAMPED_NS, **ACCESS})})"""
            )
        (stored,) = tx.one("INSERT INTO log_lines BY NAME SELECT * EXCLUDE (access) FROM lines_read")
        with tx.registered("staged_files", files):
            tx.run(
                """INSERT INTO log_files
                   SELECT session, host, file_key, arg_min(name, end_offset), arg_max(path, end_offset),
                          arg_min(stream, end_offset), arg_min(worker_id, end_offset), arg_min(job_id, end_offset),
                          arg_min(pid, end_offset), max(end_offset), min(read_ns), max(read_ns)
                   FROM staged_files GROUP BY ALL
                   ON CONFLICT DO UPDATE SET end_offset = greatest(end_offset, excluded.end_offset),
                       path = excluded.path, last_ns = greatest(last_ns, excluded.last_ns)"""
            )
            # a session known by its logs alone (its events never sent, or yet to come) is still listed
            tx.run("INSERT INTO sessions (session) SELECT DISTINCT session FROM staged_files ON CONFLICT DO NOTHING")
        with tx.registered("staged_gaps", gaps):
            (new_gaps,) = tx.one("INSERT INTO log_gaps SELECT *, now() FROM staged_gaps ON CONFLICT DO NOTHING")
        index_lines(tx, first)
        tx.run(f"INSERT INTO serve_requests BY NAME {serve_requests_sql('FROM lines_read')}")
        tx.run("DROP TABLE lines_read")
        tx.run(f"INSERT OR REPLACE INTO meta VALUES ('{LOG_SEQ_KEY}', ?)", [str(first + stored)])
        tx.count(
            log_lines=stored,
            log_lines_deduplicated=lines.num_rows - stored,
            log_batches=len(bodies),
            log_gaps=new_gaps,
        )
    return int(stored)


def index_lines(tx: Tx, first: int) -> None:
    """Index the lines stored after ``first`` (``log_index.py``): their blocks' trigrams, and the blocks of their
    files."""
    block = log_index.BLOCK_LINES
    new_lines = tx.con.sql(f"SELECT seq, text FROM log_lines WHERE seq > {first} ORDER BY seq")
    with tx.registered("staged_blocks", log_index.block_grams(new_lines.to_arrow_table())):
        tx.run(
            """INSERT INTO log_blocks SELECT block, grams::BIT FROM staged_blocks
               ON CONFLICT DO UPDATE SET grams = grams | excluded.grams"""
        )
    tx.run(
        f"""INSERT INTO log_file_blocks
            SELECT session, host, file_key, seq // {block}, count(*), min(byte_offset), max(byte_offset),
                   min(ts_ns), max(ts_ns), sum(strlen(text))
            FROM log_lines WHERE seq > {first} GROUP BY ALL
            ON CONFLICT DO UPDATE SET lines = lines + excluded.lines, bytes = bytes + excluded.bytes,
                first_offset = least(first_offset, excluded.first_offset),
                last_offset = greatest(last_offset, excluded.last_offset),
                first_ns = least(first_ns, excluded.first_ns), last_ns = greatest(last_ns, excluded.last_ns)"""
    )
