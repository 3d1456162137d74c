"""Settings of `pgcontroller`: each declared once (`model.Settings`), and from those declarations
the flags, environment variables, --help and the README's Configuration table."""

from app.settings.argv import Resolved, add_global_settings, add_serve_settings, add_setting, resolve
from app.settings.declaration import ENV_PREFIX, Setting, SettingError
from app.settings.model import BY_NAME, DECLARATIONS, MS_PER_HOUR, Settings, default_instance_id

__all__ = [
    "BY_NAME",
    "DECLARATIONS",
    "ENV_PREFIX",
    "MS_PER_HOUR",
    "Resolved",
    "Setting",
    "SettingError",
    "Settings",
    "add_global_settings",
    "add_serve_settings",
    "add_setting",
    "default_instance_id",
    "resolve",
]
