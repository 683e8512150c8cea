"""Names other packages spell alike: the skill tools' source and the tool that loads a skill."""

SOURCE = "skills"  # Tool.source of the skill tools
USE_SKILL = "use_skill"
