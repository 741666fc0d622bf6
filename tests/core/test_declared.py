"""Settings declared once (core/declared.py): each declaration holds together."""

from __future__ import annotations

from pathlib import Path

import pytest

from stalewatch.core.declared import declared
from stalewatch.core.tables import TableReader
from stalewatch.server.config import CheckoutConfig, DaemonConfig, HookConfig
from stalewatch.server.restart.policy import RestartPolicy, Rules

pytestmark = pytest.mark.unit

CLASSES = (DaemonConfig, CheckoutConfig, HookConfig, RestartPolicy)


@pytest.mark.parametrize(("cls", "key"), [(cls, key) for cls in CLASSES for key in declared(cls)])
def test_each_default_is_a_value_its_own_kind_accepts(cls: type, key: str) -> None:
    """A default written in the file reads as the default: no default is out of its bounds."""
    field, setting = declared(cls)[key]
    if field.default is None or setting.shown:  # nothing to write (a required key, one of two)
        return
    written = list(field.default) if isinstance(field.default, tuple) else field.default
    table = TableReader(Path("/etc/c.toml"), "", "checkout", 0)
    assert setting.kind.read(written, table) == field.default
    assert setting.doc and setting.kind.shows and setting.since


def test_a_toml_name_is_declared_once_across_a_table_s_classes() -> None:
    checkout = [*declared(CheckoutConfig), *declared(HookConfig)]
    assert len(checkout) == len(set(checkout))
    assert "hook_timeout" in checkout and "timeout" not in checkout  # the field's TOML name


def test_the_machine_s_rules_default_to_the_declared_policy() -> None:
    assert Rules.of(RestartPolicy()) == Rules()
