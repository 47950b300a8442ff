from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import InputError
from orchestrator.prd import Prd


def write(tmp_path: Path, data: object) -> Path:
    p = tmp_path / "prd.json"
    p.write_text(json.dumps(data, indent=2) + "\n")
    return p


def test_mark_passed_edits_one_token(tmp_path: Path) -> None:
    p = write(tmp_path, {"userStories": [
        {"id": "US-001", "title": "a", "priority": 2, "passes": False},
        {"id": "US-002", "title": "b", "priority": 1, "passes": False},
    ]})
    before = p.read_text()
    prd = Prd.load(p)
    assert prd.next_story().id == "US-002"
    prd.mark_passed("US-002")
    prd.save()
    after = p.read_text()
    assert after == before.replace('"passes": false\n    }\n  ]', '"passes": true\n    }\n  ]')
    assert Prd.load(p).next_story().id == "US-001"


def test_bad_passes_names_path(tmp_path: Path) -> None:
    p = write(tmp_path, {"userStories": [{"id": "US-1", "title": "t", "passes": "yes"}]})
    msg = r'userStories\[0\]\.passes must be true or false, got "yes"'
    with pytest.raises(InputError, match=msg):
        Prd.load(p)
