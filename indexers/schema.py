"""Arrow schemas of the three tables."""

from __future__ import annotations


def _common(pa):
    return [("gid", pa.string()), ("key", pa.int64()), ("run", pa.string()), ("run_key", pa.int64())]


def steps_schema(dim: int):
    import pyarrow as pa

    return pa.schema(_common(pa) + [
        ("sid", pa.string()), ("sid_key", pa.int64()), ("kind", pa.string()),
        ("statement", pa.string()), ("hyp", pa.list_(pa.string())), ("setting", pa.string()),
        ("setting_key", pa.int64()), ("parents", pa.list_(pa.string())),
        ("parent_keys", pa.list_(pa.int64())), ("proof", pa.string()),
        ("status", pa.string()), ("grade", pa.string()), ("audit_by", pa.string()),
        ("audit_note", pa.string()), ("repaired", pa.bool_()), ("missing", pa.string()),
        ("failed_input", pa.string()), ("agent", pa.string()), ("in_library", pa.bool_()),
        ("inserted", pa.string()), ("inserted_ts", pa.int64()), ("named_seq", pa.int64()),
        ("named_ts", pa.int64()),
        ("tokens", pa.string()), ("text_hash", pa.string()), ("content_hash", pa.string()),
        ("embedded", pa.bool_()), ("vector", pa.list_(pa.float32(), dim)),
    ])


def events_schema(dim: int):
    import pyarrow as pa

    return pa.schema(_common(pa) + [
        ("seq", pa.int64()), ("time", pa.string()), ("ts", pa.int64()), ("actor", pa.string()),
        ("kind", pa.string()), ("ids", pa.list_(pa.string())), ("id_keys", pa.list_(pa.int64())),
        ("sid_keys", pa.list_(pa.int64())), ("text", pa.string()), ("path", pa.string()),
        ("body", pa.string()), ("tokens", pa.string()), ("text_hash", pa.string()),
        ("content_hash", pa.string()), ("embedded", pa.bool_()), ("vector", pa.list_(pa.float32(), dim)),
    ])


def sources_schema(dim: int):
    import pyarrow as pa

    return pa.schema(_common(pa) + [
        ("sid", pa.string()), ("origin", pa.string()), ("retrieved", pa.string()),
        ("hash", pa.string()), ("path", pa.string()), ("text", pa.string()), ("tokens", pa.string()),
        ("text_hash", pa.string()), ("content_hash", pa.string()),
    ])


SCHEMAS = {"steps": steps_schema, "events": events_schema, "sources": sources_schema}
EMBEDDED_TABLES = ("steps", "events")
