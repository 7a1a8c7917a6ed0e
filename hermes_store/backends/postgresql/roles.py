"""Runtime roles on PostgreSQL: what a role that only reads and writes sessions needs,
giving it that once for good, and saying what a role lacks (issue 17, D16).

The database's owner creates and upgrades the schema; Hermes itself may run as a
second role that only reads and writes rows. ``grant_runtime(conn, role)``, run as the
owner (``hermes-store db grant ROLE``), gives it:

* ``CONNECT`` on the database, ``USAGE`` on schema ``public``;
* ``SELECT, INSERT, UPDATE, DELETE`` on every table, ``USAGE, SELECT, UPDATE`` on every
  sequence (``setval`` of an import that keeps ids needs ``UPDATE``);
* the same on every table and sequence the owner creates in ``public`` later
  (``ALTER DEFAULT PRIVILEGES``): the Telegram topic opt-in and every future revision
  create their tables as the owner, so the role keeps working after them without a
  second grant. Granted on an empty database, it covers the schema ``db upgrade``
  creates next.

Functions need nothing: ``EXECUTE`` is PostgreSQL's default for every role, and
triggers run with the rights of the statement that fires them.

``missing_runtime(conn, role)`` lists what a role lacks of that (``doctor`` reports it:
``runtime_findings``), each object named, so an error or a finding says what is missing
rather than repeating the whole recipe.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from ...errors import RoleError

#: what a runtime role needs on each kind of object (PostgreSQL's privilege names)
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
SEQUENCE_PRIVILEGES = ("USAGE", "SELECT", "UPDATE")
SCHEMA = "public"



@dataclass
class Missing:
    """What one role lacks for runtime use; empty lists mean nothing."""

    role: str
    connect: bool = False
    schema_usage: bool = False
    tables: dict[str, list[str]] = field(default_factory=dict)
    sequences: dict[str, list[str]] = field(default_factory=dict)
    #: privileges tables/sequences created later by ``for_owner`` would not give it
    defaults: list[str] = field(default_factory=list)
    for_owner: str | None = None

    def __bool__(self) -> bool:
        return bool(self.connect or self.schema_usage or self.tables or self.sequences
                    or self.defaults)

    def now(self) -> list[str]:
        """What the role cannot do today, one phrase per object kind."""
        out = []
        if self.connect:
            out.append("CONNECT on the database")
        if self.schema_usage:
            out.append(f"USAGE on schema {SCHEMA}")
        for what, objects in (("table", self.tables), ("sequence", self.sequences)):
            groups: dict[tuple, list[str]] = {}
            for name, privileges in sorted(objects.items()):
                groups.setdefault(tuple(privileges), []).append(name)
            for privileges, names in groups.items():
                shown = ", ".join(names[:4])
                if len(names) > 4:
                    shown += f" and {len(names) - 4} more"
                plural = "s" if len(names) > 1 else ""
                out.append(f"{', '.join(privileges)} on {what}{plural} {shown}")
        return out

    def describe(self) -> str:
        parts = self.now()
        if self.defaults:
            parts.append(f"default privileges for what {self.for_owner} creates later "
                         f"({'; '.join(self.defaults)})")
        return "; ".join(parts)


def quote(conn: sa.Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote_identifier(name)


def _owner(conn: sa.Connection) -> tuple[str, str, bool]:
    """(the database's owner, the connected role, whether it is a superuser)."""
    row = conn.exec_driver_sql(
        "SELECT pg_get_userbyid(d.datdba), current_user, r.rolsuper "
        "FROM pg_database d, pg_roles r "
        "WHERE d.datname = current_database() AND r.rolname = current_user").one()
    return row[0], row[1], bool(row[2])


def _role_exists(conn: sa.Connection, role: str) -> bool:
    return conn.exec_driver_sql(
        "SELECT 1 FROM pg_roles WHERE rolname = %(role)s", {"role": role}).first() is not None


def _objects(conn: sa.Connection, kinds: str) -> list[str]:
    """Names of the tables (``"rp"``) or sequences (``"S"``) in the schema."""
    return [r[0] for r in conn.exec_driver_sql(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %(schema)s AND c.relkind = ANY(%(kinds)s) ORDER BY c.relname",
        {"schema": SCHEMA, "kinds": list(kinds)})]


def grant_runtime(conn: sa.Connection, role: str) -> dict:
    """Give ``role`` what a runtime role needs, now and for tables the connected owner
    creates later (see the module docstring). Idempotent. Returns what was granted."""
    if not _role_exists(conn, role):
        raise RoleError(
            f"there is no role {role!r} on this server; create it first "
            f"(CREATE ROLE {role} LOGIN PASSWORD '…')")
    owner, me, superuser = _owner(conn)
    if me != owner and not superuser:
        raise RoleError(
            f"connected as {me}, but the database's owner is {owner}: run `db grant` as "
            f"the owner (the grants and the default privileges for tables it creates "
            f"later are the owner's to give)")
    if role == owner:
        raise RoleError(f"{role} owns the database: it needs no grant")
    who = quote(conn, role)
    database = quote(conn, conn.exec_driver_sql("SELECT current_database()").scalar())
    tables, sequences = ", ".join(TABLE_PRIVILEGES), ", ".join(SEQUENCE_PRIVILEGES)
    # default privileges belong to the role that will create the objects: the owner,
    # also when a superuser runs this for it
    for_owner = f"FOR ROLE {quote(conn, owner)} " if me != owner else ""
    statements = [
        f"GRANT CONNECT ON DATABASE {database} TO {who}",
        f"GRANT USAGE ON SCHEMA {SCHEMA} TO {who}",
        f"GRANT {tables} ON ALL TABLES IN SCHEMA {SCHEMA} TO {who}",
        f"GRANT {sequences} ON ALL SEQUENCES IN SCHEMA {SCHEMA} TO {who}",
        f"ALTER DEFAULT PRIVILEGES {for_owner}IN SCHEMA {SCHEMA} GRANT {tables} ON TABLES TO {who}",
        f"ALTER DEFAULT PRIVILEGES {for_owner}IN SCHEMA {SCHEMA} GRANT {sequences} "
        f"ON SEQUENCES TO {who}",
    ]
    for statement in statements:
        conn.exec_driver_sql(statement)
    return {"role": role, "owner": owner, "tables": _objects(conn, "rp"),
            "sequences": _objects(conn, "S"), "statements": statements}


def missing_runtime(conn: sa.Connection, role: str) -> Missing:
    """What ``role`` lacks of a runtime role's privileges (nothing for the owner or a
    superuser, who need no grant)."""
    owner, _me, _superuser = _owner(conn)
    missing = Missing(role, for_owner=owner)
    row = conn.exec_driver_sql(
        "SELECT rolsuper FROM pg_roles WHERE rolname = %(role)s", {"role": role}).first()
    if row is None or row[0] or role == owner:
        return missing
    params = {"role": role, "schema": SCHEMA}
    missing.connect = not conn.exec_driver_sql(
        "SELECT has_database_privilege(%(role)s, current_database(), 'CONNECT')", params).scalar()
    missing.schema_usage = not conn.exec_driver_sql(
        "SELECT has_schema_privilege(%(role)s, %(schema)s, 'USAGE')", params).scalar()
    for kinds, privileges, check, into in (
        ("rp", TABLE_PRIVILEGES, "has_table_privilege", missing.tables),
        ("S", SEQUENCE_PRIVILEGES, "has_sequence_privilege", missing.sequences),
    ):
        rows = conn.exec_driver_sql(
            f"SELECT c.relname, p.privilege FROM pg_class c "
            f"JOIN pg_namespace n ON n.oid = c.relnamespace, "
            f"unnest(%(privileges)s::text[]) WITH ORDINALITY AS p(privilege, i) "
            f"WHERE n.nspname = %(schema)s AND c.relkind = ANY(%(kinds)s) "
            f"AND NOT {check}(%(role)s, c.oid, p.privilege) ORDER BY c.relname, p.i",
            {**params, "privileges": list(privileges), "kinds": list(kinds)}).all()
        for name, privilege in rows:
            into.setdefault(name, []).append(privilege)
    missing.defaults = _missing_defaults(conn, role, owner)
    return missing


def _missing_defaults(conn: sa.Connection, role: str, owner: str) -> list[str]:
    """Privileges tables and sequences ``owner`` creates in the schema later will not
    give ``role`` (from ``pg_default_acl``: the schema's entries and the global ones)."""
    acls = conn.exec_driver_sql(
        "SELECT d.defaclobjtype, a.privilege_type "
        "FROM pg_default_acl d LEFT JOIN pg_namespace n ON n.oid = d.defaclnamespace, "
        "aclexplode(d.defaclacl) a "
        "WHERE d.defaclrole = (SELECT oid FROM pg_roles WHERE rolname = %(owner)s) "
        "AND a.grantee = (SELECT oid FROM pg_roles WHERE rolname = %(role)s) "
        "AND (d.defaclnamespace = 0 OR n.nspname = %(schema)s)",
        {"owner": owner, "role": role, "schema": SCHEMA}).all()
    have = {(kind, privilege) for kind, privilege in acls}
    lacking = []
    for kind, what, privileges in (("r", "tables", TABLE_PRIVILEGES),
                                   ("S", "sequences", SEQUENCE_PRIVILEGES)):
        absent = [p for p in privileges if (kind, p) not in have]
        if absent:
            lacking.append(f"{', '.join(absent)} on {what}")
    return lacking


def runtime_roles(conn: sa.Connection) -> list[str]:
    """Roles other than the owner (and superusers) that hold any privilege on the
    ``sessions`` table: the roles meant to run Hermes."""
    owner, _me, _superuser = _owner(conn)
    rows = conn.exec_driver_sql(
        "SELECT DISTINCT r.rolname FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a "
        "JOIN pg_roles r ON r.oid = a.grantee "
        "WHERE n.nspname = %(schema)s AND c.relname = 'sessions' AND NOT r.rolsuper "
        "ORDER BY 1", {"schema": SCHEMA}).all()
    return [r[0] for r in rows if r[0] != owner]


def runtime_findings(conn: sa.Connection, grant_hint: str) -> list[tuple[str, str]]:
    """``doctor``'s view: (status, detail) for the connected role and every runtime
    role. ``grant_hint`` is the command that fixes it, with ``{role}`` to fill in."""
    owner, me, _superuser = _owner(conn)
    roles = [me] if me != owner else []
    roles += [r for r in runtime_roles(conn) if r not in roles]
    findings = []
    for role in roles:
        missing = missing_runtime(conn, role)
        if missing:
            findings.append(("problem", f"role {role} lacks {missing.describe()}: "
                             f"{grant_hint.replace('{role}', role)}"))
    if not findings:
        checked = ", ".join(roles) if roles else "none besides the owner"
        findings.append(("ok", f"runtime roles ({checked}) hold every privilege they need, "
                         "also for tables created later"))
    return findings


class PostgresqlRoles:
    """``Backend.roles`` of the PostgreSQL backend: who may use the database."""

    RoleError = RoleError

    def grant_runtime(self, conn: sa.Connection, role: str) -> dict:
        return grant_runtime(conn, role)

    def missing_runtime(self, conn: sa.Connection, role: str) -> Missing:
        return missing_runtime(conn, role)

    def runtime_findings(self, conn: sa.Connection, grant_hint: str) -> list[tuple[str, str]]:
        return runtime_findings(conn, grant_hint)


ROLES = PostgresqlRoles()

__all__ = ["ROLES", "Missing", "PostgresqlRoles", "RoleError", "grant_runtime",
           "missing_runtime", "runtime_findings", "runtime_roles"]
