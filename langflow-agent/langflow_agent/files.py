"""Uploading a message's files to Langflow, and deleting them once the run is over.

Two routes, chosen per file (Langflow 1.13, ``langflow/api/v1/files.py`` and ``api/v2/files.py``):

- images: ``POST /api/v1/files/upload/{flow UUID}`` → 201 ``{"flowId", "file_path": "<flow>/<timestamp>_<name>"}``,
  deleted with ``DELETE /api/v1/files/delete/{flow}/{<timestamp>_<name>}`` (200, also when it is gone).
  Langflow's files docs: "/v2/files doesn't support image files. To send image files to your flows
  through the API, use Upload image files (v1)".
- other files: ``POST /api/v2/files`` → 201 ``{"id", "name", "path": "<user>/<name>", "size"}``, kept in the
  key owner's "My Files" until ``DELETE /api/v2/files/{id}`` (200; 404 once gone).

Either path goes into the Chat Input's ``files``. The name sent is the person's file name made safe
for both routes (no separators, ``..``, control or format characters; 255 bytes at most) with a short
random tag, so two members sending ``image-1.png`` at once never overwrite each other (v1 names by
the second, v2 by the name).
"""

from __future__ import annotations

import uuid

from runner_kit.inputs import InputFile, safe_file_name

MAX_STEM_BYTES = 120
MAX_EXT_CHARS = 16


def is_image(f: InputFile) -> bool:
    return f.kind == "image" or (f.mime_type or "").lower().startswith("image/")


def upload_name(name: str, tag: str | None = None) -> str:
    """``report.pdf`` → ``report-1a2b3c4d.pdf``: a name both upload routes accept and no other upload has."""
    tag = tag or uuid.uuid4().hex[:8]
    clean = safe_file_name(name, max_stem_bytes=MAX_STEM_BYTES, max_ext_chars=MAX_EXT_CHARS)
    stem, dot, ext = clean.rpartition(".")
    return f"{stem}-{tag}.{ext}" if dot and stem else f"{clean}-{tag}"
