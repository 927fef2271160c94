"""Skills: an index in the system prompt, activated on demand, narrowing tools only once active.

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from ._catalogue import ALWAYS_ALLOWED, Skill, SkillCatalogue, SkillGate, load_skill

__all__ = ["ALWAYS_ALLOWED", "Skill", "SkillCatalogue", "SkillGate", "load_skill"]
