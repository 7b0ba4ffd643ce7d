"""Migrations since the last release are expand-only (docs/deploy.md).

During a rolling upgrade a replica of the last release serves from the database this tree's
migrations have already changed, so a migration after the release's head (deploy/releases.txt)
may only add: tables, nullable or defaulted columns, indexes, data fixes. Contract steps (drops,
renames, type changes, NOT NULL without a default) wait for a later release, once no replica of
the release that still uses the old shape can be running. `upgrade()` of each such script is read
(its AST, and the SQL strings it executes); `downgrade()` is exempt.
"""

from __future__ import annotations

import ast
import pathlib
import re
import textwrap

import pytest

from tools import releases

VERSIONS = pathlib.Path(__file__).resolve().parents[3] / "control" / "db" / "migrations" / "versions"

# Alembic operations (op.* and batch_op.*) that remove or rename what the release still uses.
CONTRACT_OPS = {
    "drop_table",
    "drop_column",
    "drop_index",
    "drop_constraint",
    "rename_table",
    "drop_table_comment",
    "drop_column_comment",
}
CONTRACT_SQL = re.compile(
    r"\b(DROP|RENAME|TRUNCATE)\b|\bALTER\s+TABLE\b.*\b(TYPE|SET\s+NOT\s+NULL|SET\s+DATA\s+TYPE)\b",
    re.IGNORECASE | re.DOTALL,
)


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_false(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def contract_operations(source: str) -> list[str]:
    """Each contract step in a migration script's code outside `downgrade()`, as `line N: what`."""
    found: list[str] = []
    for top in ast.parse(source).body:
        if isinstance(top, ast.FunctionDef) and top.name == "downgrade":
            continue
        for node in ast.walk(top):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            op, where = node.func.attr, f"line {node.lineno}"
            if op in CONTRACT_OPS:
                found.append(f"{where}: {op}")
            elif op == "alter_column":
                if _kw(node, "new_column_name") is not None:
                    found.append(f"{where}: alter_column renames a column")
                if _kw(node, "type_") is not None:
                    found.append(f"{where}: alter_column changes a type")
                if _is_false(_kw(node, "nullable")):
                    found.append(f"{where}: alter_column makes a column NOT NULL")
            elif op == "add_column":
                for column in (a for a in node.args if isinstance(a, ast.Call)):
                    if _is_false(_kw(column, "nullable")) and _kw(column, "server_default") is None:
                        found.append(f"{where}: add_column NOT NULL without a server_default")
            elif op == "execute":
                found += [f"{where}: SQL {s[:60]!r}" for s in _strings(node) if CONTRACT_SQL.search(s)]
    return found


def _revision(path: pathlib.Path) -> tuple[str, str | None]:
    values: dict[str, str | None] = {}
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str | None)
        ):
            values[node.targets[0].id] = node.value.value
    return str(values["revision"]), values.get("down_revision")


def scripts_since(head: str) -> list[pathlib.Path]:
    """The migration scripts that come after revision `head` (the release's last one)."""
    scripts = {p: _revision(p) for p in sorted(VERSIONS.glob("[0-9]*.py"))}
    down = dict(scripts.values())
    if head not in down:
        raise AssertionError(f"the release's head revision {head} is not among {sorted(down)}")
    after: list[pathlib.Path] = []
    for path, (rev, _) in scripts.items():
        seen: str | None = rev
        while seen is not None and seen != head:
            seen = down.get(seen)
        if seen == head and rev != head:
            after.append(path)
    return after


def test_migrations_since_the_last_release_only_expand() -> None:
    release = releases.last_release()
    scripts = scripts_since(release.alembic_head)
    assert scripts, f"no migration after {release.tag}'s head {release.alembic_head}: is releases.txt current?"
    bad = {p.name: ops for p in scripts if (ops := contract_operations(p.read_text()))}
    assert not bad, (
        f"contract steps in migrations after {release.tag} (a replica of {release.tag} may still serve "
        f"from the migrated database; move them to a later release, docs/deploy.md): {bad}"
    )


CONTRACT_EXAMPLES = {
    "drop column": 'op.drop_column("jobs", "stage")',
    "drop column in a batch": 'with op.batch_alter_table("jobs") as b:\n    b.drop_column("stage")',
    "drop index": 'op.drop_index("ix_jobs_owner_request", table_name="jobs")',
    "rename": 'op.alter_column("jobs", "stage", new_column_name="phase")',
    "type change": 'op.alter_column("jobs", "desired", type_=sa.Integer(), existing_type=sa.String(16))',
    "not null": 'op.alter_column("jobs", "fleet", nullable=False)',
    "not null column without default": 'op.add_column("jobs", sa.Column("x", sa.Integer(), nullable=False))',
    "raw SQL drop": 'op.execute("ALTER TABLE jobs DROP COLUMN stage")',
    "raw SQL type": 'op.execute(sa.text("ALTER TABLE jobs ALTER COLUMN desired TYPE integer"))',
    "in a helper upgrade() calls": 'def _helper() -> None:\n    op.drop_table("secrets")',
}
EXPAND_EXAMPLES = {
    "new table": 'op.create_table("t", sa.Column("id", sa.String(8), primary_key=True))',
    "nullable column": 'op.add_column("jobs", sa.Column("x", sa.Integer(), nullable=True))',
    "defaulted column": 'op.add_column("jobs", sa.Column("x", sa.Integer(), nullable=False, server_default="0"))',
    "index": 'op.create_index("ix_jobs_x", "jobs", ["x"], unique=True)',
    "relax NOT NULL": 'op.alter_column("jobs", "fleet", nullable=True)',
    "data fix": "op.execute(\"UPDATE jobs SET request_id = '' WHERE request_id IS NULL\")",
    "drops in downgrade": 'def downgrade() -> None:\n    op.drop_table("t")\n    op.drop_column("jobs", "x")',
}


def _script(body: str) -> str:
    if body.startswith("def "):
        return body
    return "def upgrade() -> None:\n" + textwrap.indent(body, "    ")


@pytest.mark.parametrize("body", CONTRACT_EXAMPLES.values(), ids=CONTRACT_EXAMPLES.keys())
def test_the_check_finds_a_contract_step(body: str) -> None:
    assert contract_operations(_script(body)), body


@pytest.mark.parametrize("body", EXPAND_EXAMPLES.values(), ids=EXPAND_EXAMPLES.keys())
def test_the_check_lets_expansions_through(body: str) -> None:
    assert contract_operations(_script(body)) == [], body


def test_the_check_would_have_refused_the_draft_of_0008(tmp_path: pathlib.Path) -> None:
    """0008 first changed jobs.desired to an integer and dropped the index it superseded: the
    release's replica then failed every submission (it inserts desired = '')."""
    draft = _script(
        'op.drop_index("ix_jobs_owner_request", table_name="jobs")\n'
        'with op.batch_alter_table("jobs", schema=None) as batch_op:\n'
        '    batch_op.alter_column("desired", existing_type=sa.String(length=16), type_=sa.Integer(),'
        ' existing_nullable=False, postgresql_using="desired::integer")\n'
    )
    assert [f.split(": ", 1)[1] for f in contract_operations(draft)] == [
        "drop_index",
        "alter_column changes a type",
    ]
