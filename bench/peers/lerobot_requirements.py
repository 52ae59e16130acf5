"""Print lerobot's own requirements, one a line, for `make lerobot`: its base dependencies and its `dynamixel` and
`feetech` extras as its installed metadata declares them, less torch, torchvision and torchcodec, which the Makefile
installs itself (docs/lerobot.md, "Torch"). Runs in the LeRobot venv after `pip install --no-deps lerobot==…`."""

import re
from importlib.metadata import requires

EXTRAS = ("dynamixel", "feetech")
OWN = ("torch", "torchvision", "torchcodec")

for line in requires("lerobot") or ():
    req, _, marker = line.partition(";")
    name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()
    extra = re.search(r'extra == "([^"]+)"', marker)
    if name in OWN or (extra and extra.group(1) not in EXTRAS):
        continue
    marker = re.sub(r'\s*(and\s+)?extra == "[^"]+"', "", marker).strip()
    print(req.strip() + (f"; {marker}" if marker else ""))
