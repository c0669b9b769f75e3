"""Where client work runs: `local` (in-process, vectorized) or `ray` (Ray actors)."""
from .local import LocalBackend


def make_backend(config: dict, problem):
    """Build the backend named by `config["name"]` for `problem` (its training clients)."""
    options = {k: v for k, v in config.items() if k != "name"}
    if config["name"] == "local":
        device = options.pop("device", "cpu")
        if device != "cpu":  # whole rounds compiled with JAX (fco_ray/backends/device)
            from .device.backend import DeviceBackend

            return DeviceBackend(problem, device)
        return LocalBackend(problem, **options)
    if config["name"] == "ray":
        from .ray_backend import RayBackend

        return RayBackend(problem, **options)
    raise ValueError(f"backend.name must be one of ['local', 'ray'], got {config['name']!r}")
