"""The settings' old import path; they are declared in `app.settings`."""

from app.settings import SettingError, Settings, default_instance_id

__all__ = ["SettingError", "Settings", "default_instance_id"]
