"""vastui's configuration, in three parts: the config file's schema and validation (schema.py),
the secrets read beside it (secrets.py: the Vast API key, curio's database password) and where
vastui's files are and how they are written (paths.py). The names below are the package's
interface; each is defined once, in its module."""

from vastui.config.paths import (
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    config_home,
    default_config_path,
    default_db_path,
    ensure_parent_dir,
    ensure_state_dir,
    make_private_dir,
    open_private,
    private_fd,
    state_dir,
    tighten_private,
    write_private,
)
from vastui.config.schema import (
    BID_MODES,
    DEFAULT_FILTER,
    DEFAULT_IMAGE,
    DISK_NEED_GB,
    LABEL_PREFIX,
    AlertsSection,
    BidsSection,
    Config,
    ConfigError,
    CurioSection,
    DeadlinesSection,
    FleetSection,
    MetricsSection,
    OffersSection,
    ProvingSection,
    SshSection,
    UiSection,
    VastSection,
    describe_value,
    is_listen,
    load_config,
)
from vastui.config.secrets import (
    ApiKeyError,
    curio_db_password_path,
    load_api_key,
    load_curio_db_password,
    vast_api_key_path,
)

__all__ = [
    "BID_MODES", "DEFAULT_FILTER", "DEFAULT_IMAGE", "DISK_NEED_GB", "LABEL_PREFIX",
    "PRIVATE_DIR_MODE", "PRIVATE_FILE_MODE", "AlertsSection", "ApiKeyError", "BidsSection",
    "Config", "ConfigError", "CurioSection", "DeadlinesSection", "FleetSection", "MetricsSection",
    "OffersSection", "ProvingSection", "SshSection", "UiSection", "VastSection", "config_home",
    "curio_db_password_path", "default_config_path", "default_db_path", "describe_value",
    "ensure_parent_dir", "ensure_state_dir", "is_listen", "load_api_key", "load_config",
    "load_curio_db_password", "make_private_dir", "open_private", "private_fd", "state_dir",
    "tighten_private", "vast_api_key_path", "write_private",
]  # fmt: skip
