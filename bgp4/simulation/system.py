"""The physical system a molecule lives in: force field, solvent and constraints.

A `SystemSpec` names the three choices `bgp4 simulate` offers (`--forcefield`, `--solvent`,
`--constraints`); the data file records them beside the molecule, and every later stage rebuilds
the same OpenMM system from that record (`SystemSpec.from_record`). Nonbonded interactions are
always computed without cutoff (a small molecule in implicit solvent or vacuum), and the
centre-of-mass motion is removed.

>>> spec = SystemSpec(constraints="none")
>>> spec.files()
('amber99sbildn.xml', 'amber96_obc.xml')
>>> SystemSpec.from_record({"constraints": "HBonds"}) == SystemSpec()
True
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bgp4.errors import InputError

# OpenMM is imported inside the functions that build systems: MDSettings validates a SystemSpec in
# the CLI process and in each MD replica before either needs OpenMM.
if TYPE_CHECKING:
    import openmm
    import openmm.app as app

__all__ = [
    "FORCE_FIELDS",
    "SOLVENTS",
    "CONSTRAINTS",
    "DEFAULT_FORCE_FIELD",
    "SystemSpec",
    "force_field",
]

#: Force-field name -> (protein files, implicit-solvent files), all bundled with OpenMM. The OBC
#: files are the ones each force field is parametrized with (amber96_obc, OBC2's GBSAOBCForce, for
#: the amber99 family; OBC2 for amber14; OBC1 for amber96). amber96 is openmmtools'
#: `AlanineDipeptideImplicit` (ff96, OBC1: the published 300 K table's alanine dipeptide target) to
#: within 1e-3 kJ/mol (tests/test_system.py).
FORCE_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "amber99sb-ildn": (("amber99sbildn.xml",), ("amber96_obc.xml",)),
    "amber14": (("amber14-all.xml",), ("implicit/obc2.xml",)),
    "amber96": (("amber96.xml",), ("implicit/obc1.xml",)),
}
DEFAULT_FORCE_FIELD = "amber99sb-ildn"
#: obc: generalized-Born implicit water (OBC); vacuum: no solvent model.
SOLVENTS = ("obc", "vacuum")
#: hbonds: every bond to a hydrogen held at its force-field length; none: every bond free.
CONSTRAINTS = ("hbonds", "none")


@functools.lru_cache(maxsize=8)
def force_field(files: tuple[str, ...]) -> app.ForceField:
    """OpenMM's ForceField of `files` (parsed once per process: the XML takes about a second)."""
    import openmm.app as app

    return app.ForceField(*files)


def _choice(value: Any, choices: tuple[str, ...], what: str) -> str:
    key = str(value).strip().lower()
    if key not in choices:
        raise InputError(f"unknown {what} {value!r} (--{what.replace(' ', '-')}); choose one of {', '.join(choices)}")
    return key


@dataclass(frozen=True)
class SystemSpec:
    """Force field, solvent and constraints of a molecule's OpenMM system (validated on creation)."""

    forcefield: str = DEFAULT_FORCE_FIELD
    solvent: str = "obc"
    constraints: str = "hbonds"

    def __post_init__(self) -> None:
        object.__setattr__(self, "forcefield", _choice(self.forcefield, tuple(FORCE_FIELDS), "forcefield"))
        object.__setattr__(self, "solvent", _choice(self.solvent, SOLVENTS, "solvent"))
        object.__setattr__(self, "constraints", _choice(self.constraints, CONSTRAINTS, "constraints"))

    def files(self) -> tuple[str, ...]:
        """The OpenMM force-field files of this system, protein first."""
        protein, implicit = FORCE_FIELDS[self.forcefield]
        return protein + (implicit if self.solvent == "obc" else ())

    def create_system(self, topology: app.Topology) -> openmm.System:
        """The OpenMM system of `topology`; raises InputError for a residue the force field does not cover."""
        import openmm.app as app

        try:
            return force_field(self.files()).createSystem(
                topology,
                nonbondedMethod=app.NoCutoff,
                constraints=app.HBonds if self.constraints == "hbonds" else None,
                removeCMMotion=True,
            )
        except ValueError as exc:  # OpenMM: "No template found for residue 3 (XYZ). ..."
            first = str(exc).split(".  ")[0].strip()
            raise InputError(f"the force field {self.forcefield} does not cover this molecule: {first}") from None

    def record(self) -> dict[str, Any]:
        """The keys a settings record stores (`force_field` lists the files, for a reader)."""
        return {
            "forcefield": self.forcefield,
            "solvent": self.solvent,
            "constraints": self.constraints,
            "force_field": list(self.files()),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | None) -> SystemSpec:
        """The system a settings record names; files of older versions (which record at most
        `constraints: HBonds`) get the defaults: amber99sb-ildn in OBC implicit solvent, X-H constrained."""
        record = record or {}
        return cls(
            forcefield=record.get("forcefield", DEFAULT_FORCE_FIELD),
            solvent=record.get("solvent", "obc"),
            constraints=record.get("constraints", "hbonds"),
        )
