"""Regress u(x) + log q(x) over MD frames on the orbit term o(x): with the right log q a flow that
learned the data's density in its own coordinates gives slope 0; with log q lacking o, slope 1."""
import sys, numpy as np, torch
from bgp4.generator.model import load_generator
from bgp4.simulation.data import load_trajectory
from bgp4.flows.geometry import orbit_log_volume
torch.set_num_threads(1)
bg = load_generator(sys.argv[1] + "/model.pt").eval(); d = load_trajectory(sys.argv[2])
x = torch.as_tensor(d.xyz[:: max(1, d.n_frames // 20000)], dtype=torch.float64)
u = d.energies[:: max(1, d.n_frames // 20000)] / d.molecule().kT(600.0)
with torch.no_grad():
    lq = torch.cat([bg.log_prob(c.to(bg.dtype)) for c in x.split(2000)]).double().numpy()
    t = bg.transform; b = t.superpose(x)[:, t.rigid_block]; ref = t.rigid_ref
    o = (orbit_log_volume(b, ref) - orbit_log_volume(ref[None], ref)).numpy()
ok = np.isfinite(lq)
for name, y in (("new log q", u + lq), ("old log q (new + o)", u + lq + o)):
    A = np.vstack([o[ok], np.ones(ok.sum())]).T
    coef, res, *_ = np.linalg.lstsq(A, y[ok], rcond=None)
    resid = y[ok] - A @ coef
    se = resid.std() / (o[ok].std() * np.sqrt(ok.sum()))
    print(f"{name}: slope of u + log q on o = {coef[0]:+.3f} +- {se:.3f} (naive SE, frames correlated); residual std {resid.std():.3f}")
