"""Skills: an index in the system prompt, activated on demand, narrowing tools only once active."""

from ._catalogue import ALWAYS_ALLOWED, Skill, SkillCatalogue, SkillGate, load_skill

__all__ = ["ALWAYS_ALLOWED", "Skill", "SkillCatalogue", "SkillGate", "load_skill"]
