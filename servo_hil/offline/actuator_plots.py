"""Actuator diagrams: torque–speed envelope (MuJoCo DC motor model §1.1–§1.2, Fig. 1–3) and drive/backdrive
diagram (friction paper, Fig. 2–4). Both are computed by the kernel itself, so they show what it simulates."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; no display needed

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

from hil.kernel import LAWS, Kernel, friction_budget
from hil.params.actuator import ActuatorSpec


def supply_voltage(spec: ActuatorSpec) -> float:
    """The voltage the firmware can put on the motor at full command [V]."""
    fw = spec.firmware
    v = getattr(fw, "supply_v", 0.0) or 0.0
    return v * getattr(fw, "max_duty", 1.0)


def steady_torque(spec: ActuatorSpec, voltage: float, omega: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Output torque [N·m] at constant voltage and speeds `omega` [rad/s], asked of the kernel.

    Returns (electrical torque incl. saturation and drag, same minus the friction budget the
    actuator spends when moving freely).
    """
    omega = np.asarray(omega, dtype=float)
    k = Kernel(len(omega), 1e-6)
    p = spec.kernel_params()
    p.update(law=LAWS["voltage"], supply_v=0.0, ctrl_limited=0, slew=0.0, vmax=0.0, te=0.0,
             load_inertia=1e9, budget=0, encoder_counts=0.0)
    for j, w in enumerate(omega):
        k.set_params(j, p)
        k.set_state(j, omega=float(w))
    k.step(voltage)
    b = p["damping_b1"], p["damping_b2"], p["damping_b3"]
    g = p["gear"]
    tau = np.array([k.get_state(j)["torque"] for j in range(len(omega))])
    tau -= omega * (b[0] + b[1] * np.abs(omega) + b[2] * omega**2) * g * g
    net = tau.copy()
    if spec.friction is not None:
        fp = spec.kernel_params()
        net -= np.sign(omega) * np.array([friction_budget(fp, t, 0.0, w) for t, w in zip(tau, omega, strict=True)])
    return tau, net


def torque_speed_figure(spec: ActuatorSpec, voltage: float | None = None):
    """Torque–speed envelope in all four quadrants at 100/75/50/25 % of `voltage`."""
    v = voltage or supply_voltage(spec)
    if not v > 0:
        raise ValueError(f"{spec.name}: no supply voltage to draw the envelope at; pass one")
    m = spec.motor
    w0 = v * m.kt / (m.kt**2 + m.resistance * m.damping[0]) / m.gear
    omega = np.linspace(-1.3 * w0, 1.3 * w0, 401)
    fig, ax = plt.subplots(figsize=(7, 5))
    for frac, alpha in ((1.0, 1.0), (0.75, 0.7), (0.5, 0.5), (0.25, 0.35)):
        for sign in (1, -1):
            tau, net = steady_torque(spec, sign * frac * v, omega)
            label = f"±{frac * v:.3g} V" if sign > 0 else None
            ax.plot(omega, tau, color="C0", alpha=alpha, label=label)
            if spec.friction is not None and frac == 1.0:
                ax.plot(omega, net, color="C3", alpha=alpha, ls="--",
                        label=f"net of {spec.friction.model} friction" if sign > 0 else None)
    ax.axhline(0, color="k", lw=0.5)
    ax.axvline(0, color="k", lw=0.5)
    ax.set_xlabel("output speed ω [rad/s]")
    ax.set_ylabel("output torque τ [N·m]")
    ax.set_title(f"{spec.name}: torque–speed envelope (saturation and drag included)")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def drive_backdrive_figure(spec: ActuatorSpec, tau_range: float | None = None, speeds=(0.0, 1.0, 2.0)):
    """Drive/backdrive diagram at rest: static (gray), drive (blue) and backdrive (red) areas.

    At ω = 0 the joint stays static where |τm + τe| ≤ τ_fm(τm, τe); it is driven where the motor
    torque wins and back-driven where the external torque wins. Thin lines: the area boundaries
    at the speeds in `speeds` (rad/s), as in the paper's Fig. 4.
    """
    if spec.friction is None:
        raise ValueError(f"{spec.name}: a drive/backdrive diagram needs a friction model (--model mN)")
    p = spec.kernel_params()
    if tau_range is None:
        tau_range = abs(steady_torque(spec, supply_voltage(spec) or 12.0, np.array([0.0]))[0][0])
    tm = np.linspace(0.0, tau_range, 301)
    te = np.linspace(-1.5 * tau_range, 0.5 * tau_range, 401)
    TM, TE = np.meshgrid(tm, te)
    budget = friction_budget(p, TM, TE, 0.0)
    total = TM + TE
    area = np.where(np.abs(total) <= budget, 0, np.where(total > 0, 1, 2))
    fig, ax = plt.subplots(figsize=(6, 5))
    ax.pcolormesh(TM, TE, area, cmap=ListedColormap(["0.8", "#9ecae1", "#fcae91"]), shading="auto", vmin=0, vmax=2)
    ax.plot(tm, -tm, "k--", lw=0.8, label="τm = −τe (no friction needed)")
    for w in speeds[1:]:
        b = friction_budget(p, TM, TE, w)
        ax.contour(TM, TE, np.abs(total) - b, levels=[0.0], colors="k", linewidths=0.6, alpha=0.4)
    ax.set_xlabel("motor torque τm [N·m]")
    ax.set_ylabel("external torque τe [N·m]")
    ax.set_title(f"{spec.name} {spec.friction.model}: drive (blue) / static (gray) / backdrive (red)")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig
