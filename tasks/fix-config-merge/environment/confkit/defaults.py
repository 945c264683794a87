"""The settings every service starts from."""

DEFAULTS = {
    "server": {
        "host": "127.0.0.1",
        "port": 8080,
        "tls": {"enabled": False, "cert": None},
    },
    "logging": {"level": "info", "handlers": ["console"]},
    "features": {},
}
