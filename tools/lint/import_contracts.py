"""An import-linter contract type the built-in ones lack: a package may import only what is listed.

`allowlist` (registered in pyproject.toml's `[tool.importlinter]`): every module under
`source_module` imports only modules of its own package, of the standard library, or of the
top-level packages in `allowed_packages`. Only direct imports are checked: what an allowed
package imports in turn is that package's business (the generated `sfpb` messages import
betterproto2, for instance). `scripts` are modules of the package that are never imported, only
run as programs elsewhere (with another Python): they are exempt, and importing one is a
violation too. The graph must include external packages
(`include_external_packages = true`), or a third-party import would go unseen.
"""

from __future__ import annotations

import sys
from typing import Any

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def _top_level(module: str) -> str:
    return module.split(".", 1)[0]


def _names(value: object) -> list[str]:
    """A parsed list option (the contract's attribute holds the value, no longer the field)."""
    return [str(v) for v in value] if isinstance(value, list | tuple | set) else []


class AllowlistContract(Contract):
    """`source_module` imports only its own package, the standard library and `allowed_packages`."""

    type_name = "allowlist"

    source_module = fields.StringField()
    allowed_packages = fields.ListField(subfield=fields.StringField())
    scripts = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        source = str(self.source_module)
        allowed = set(_names(self.allowed_packages)) | set(sys.stdlib_module_names)
        scripts = set(_names(self.scripts))
        own = {source, *graph.find_descendants(source)} - scripts
        illegal: list[dict[str, Any]] = []
        for importer in sorted(own):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if imported in scripts:
                    pass  # run as a program elsewhere, never imported
                elif imported in own or _top_level(imported) in allowed:
                    continue
                details = graph.get_import_details(importer=importer, imported=imported)
                lines = tuple(d["line_number"] for d in details)
                illegal.append({"importer": importer, "imported": imported, "line_numbers": lines})
        return ContractCheck(kept=not illegal, warnings=None, metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        allowed = ", ".join(_names(self.allowed_packages))
        output.print_error(
            f"{self.source_module} may import only the standard library and {allowed}:",
            bold=False,
        )
        output.new_line()
        for item in check.metadata["illegal"]:
            lines = ", ".join(map(str, item["line_numbers"]))
            output.print_error(f"- {item['importer']} -> {item['imported']} (l.{lines})", bold=False)
        output.new_line()
