"""``swe-sandbox gc``, ``image build`` and ``image pull``: the container engines' housekeeping.

The container modules are imported only inside each command, so the CLI starts without touching
any engine.
"""

from __future__ import annotations

import collections
import json
from typing import Annotated

import typer

from swe_sandbox.cli.exit_codes import EXIT_FAILED, EXIT_OK
from swe_sandbox.cli.guard import guarded
from swe_sandbox.cli.pull_display import show_pulls
from swe_sandbox.cli.signals import echo_err

GC_HELP = """\
Remove swe-sandbox containers and snapshots whose owner process is gone.

Every container and snapshot image swe-sandbox creates is labelled with its owner's host, pid
(and the pid's start time) and run id. A run that was killed (kill -9, a lost machine) cannot
remove its container; the container's lifetime guard ends it after environment.max_lifetime at
the latest, and gc removes it now, with the snapshot images (docker, podman) and snapshot stores
(bwrap, local, ssh: under /var/tmp) of dead owners. What an owner that still runs made is kept;
an image a container still uses too. Engines that are not installed or not running are skipped.
Allow-list proxies (network: allowlist) whose owner is gone are killed too (not with --dry-run).
Exit status 0, or 1 when an engine failed to list or remove.
"""

IMAGE_BUILD_HELP = """\
Build the default sandbox images: swe-sandbox/base (Debian minbase, bash, coreutils, procps, git,
python3, ca-certificates) and swe-sandbox/nopython (busybox and bash, for the exec fallback).

Without a registry (the default), base is made offline: debootstrap from the Debian mirror apt
uses into a cached rootfs, imported with `docker import` / `podman import`. --from-registry
builds base from images/Containerfile instead (needs access to docker.io). Needs root.
"""

IMAGE_PULL_HELP = """\
Pull every image a task file names (or the IMAGEs given) into the engine, N at a time, with
progress: before a batch, so that no instance waits for its image.

Each image is pulled as a sandbox would pull it (environment.image_pull: missing skips images
already there, always pulls each again, never only checks; environment.pull_timeout; the engine's
own credentials; TLS verification off for loopback registries). Tasks without an image get one from
--image-template. The summary names each failed image, its cause (not found, unauthorized,
unreachable, timeout) and the instances that need it. Exit status 0 when every image is there,
1 when some failed, 2 for a usage, config or task-file error, 3 when the engine is unavailable.
"""

app = typer.Typer()
image_app = typer.Typer(name="image", help="Build or pull the sandbox images.", no_args_is_help=True,
                        add_completion=False)


@app.command("gc", help=GC_HELP)


def gc_command(
    backends: Annotated[
        list[str] | None,
        typer.Option("--env", "-e", metavar="NAME", help="Only this backend (docker or podman); repeatable."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be removed.")] = False,
    all_hosts: Annotated[
        bool, typer.Option("--all-hosts", help="Also containers created from other hosts (a shared remote engine).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as a JSON list.")] = False,
) -> None:
    from swe_sandbox.environments import environment_class

    chosen = tuple(backends or ("docker", "podman"))
    unknown = [b for b in chosen if b not in ("docker", "podman")]
    if unknown:
        raise typer.BadParameter(f"{', '.join(unknown)} (gc knows docker and podman)", param_hint="--env")
    report = [entry for name in chosen for entry in environment_class(name).gc(dry_run=dry_run, all_hosts=all_hosts)]
    if not backends:  # the host's snapshot stores (bwrap, local, ssh) belong to no engine
        from swe_sandbox.environments.snapshot import gc_stores

        report += gc_stores(dry_run=dry_run)
        if not dry_run:  # allow-list proxies of dead owners (they end with their owner; this is the rest)
            from swe_sandbox.network.proxy_process import gc as gc_proxies

            report += [{"backend": "network", "id": "", "run_id": "", "owner_pid": "", "action": "removed"}
                       for _ in range(gc_proxies())]
            from swe_sandbox.environments.direct import gc as gc_channels

            report += [{"backend": "channel", "id": "", "run_id": "", "owner_pid": "", "action": "removed"}
                       for _ in range(gc_channels())]
    failed = any(entry["action"].startswith("error") for entry in report)
    if as_json:
        typer.echo(json.dumps(report))
    else:
        for entry in report:
            typer.echo(f"{entry['backend']} {entry['id'] or '-'} run={entry['run_id'] or '-'} "
                       f"owner_pid={entry['owner_pid'] or '-'}: {entry['action']}")
        removed = collections.Counter(entry["backend"] for entry in report if entry["action"] == "removed")
        others = sum(n for backend, n in removed.items() if backend in ("network", "channel"))
        typer.echo(f"{sum(removed.values()) - others} container(s) or snapshot(s) removed"
                   + (f", {others} proxy(ies) or channel directory(ies)" if others else "")
                   + (" (dry run)" if dry_run else ""))
    if failed:
        raise typer.Exit(EXIT_FAILED)


@image_app.command("build", help=IMAGE_BUILD_HELP)
def image_build_command(
    engines: Annotated[
        list[str] | None,
        typer.Option("--engine", metavar="NAME", help="docker or podman; repeatable. Default: both."),
    ] = None,
    images: Annotated[
        list[str] | None,
        typer.Option("--image", metavar="NAME", help="base or nopython; repeatable. Default: both."),
    ] = None,
    from_registry: Annotated[
        bool, typer.Option("--from-registry", help="Build base from images/Containerfile (needs a registry).")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the image exists.")] = False,
) -> None:
    from swe_sandbox.images import ENGINES, IMAGES, ImageBuildError, build_images

    try:
        built = build_images(engines or ENGINES, images or tuple(IMAGES), from_registry=from_registry,
                             force=force, echo=echo_err)
    except ImageBuildError as exc:
        echo_err(f"swe-sandbox: image build failed: {exc}")
        raise typer.Exit(EXIT_FAILED) from None
    for name in built:
        typer.echo(name)


@image_app.command("pull", help=IMAGE_PULL_HELP)
def image_pull_command(
    sources: Annotated[list[str], typer.Argument(metavar="TASKS|IMAGE...", show_default=False,
                                                 help="Task files (.json, .jsonl) and image references.")],
    env: Annotated[str, typer.Option("--env", "-e", metavar="NAME|FILE", help="docker, podman, or a YAML "
                                     "environment config of either.")] = "docker",
    workers: Annotated[int, typer.Option("-w", "--workers", min=1, help="Pulls at once.")] = 4,
    overrides: Annotated[list[str] | None, typer.Option("-c", "--set", metavar="environment.KEY=VALUE",
                                                           help="Environment override, repeatable.")] = None,
    image_template: Annotated[str | None, typer.Option("--image-template", metavar="TEMPLATE",
                                                          help="Image of each task without one (as for batch).")] = None,
) -> None:
    def body() -> int:
        from swe_sandbox.batch.pulls import collect_images, pull_images
        from swe_sandbox.config import apply_overrides, load_environment_config
        from swe_sandbox.preflight import require_usable

        env_data = apply_overrides(load_environment_config(env), list(overrides or []), section="environment")
        images = collect_images(list(sources), image_template)
        require_usable(str(env_data.get("backend")))
        with show_pulls():
            report = pull_images(images, env_data, workers)
        for line in report.lines():
            typer.echo(line)
        return EXIT_FAILED if report.failed else EXIT_OK

    raise typer.Exit(guarded(body))


app.add_typer(image_app, name="image")
