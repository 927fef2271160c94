"""Skills: an index in the system prompt, activated on demand, narrowing tools only once active;
enabled or disabled per user (`SkillSettings`, in the store: imported on first use, so a storeless
run never loads the database).

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from typing import TYPE_CHECKING

from .. import _lazy
from ._catalogue import ALWAYS_ALLOWED, Skill, SkillCatalogue, SkillGate, load_skill

if TYPE_CHECKING:
    from ._enabled import SKILL_MIGRATIONS, SkillSettings

__getattr__ = _lazy.lazy_names(__name__, {"SkillSettings": "._enabled", "SKILL_MIGRATIONS": "._enabled"})

__all__ = ["ALWAYS_ALLOWED", "SKILL_MIGRATIONS", "Skill", "SkillCatalogue", "SkillGate", "SkillSettings", "load_skill"]
