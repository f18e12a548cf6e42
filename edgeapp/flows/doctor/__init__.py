"""`edgeapp doctor`: what is installed and plugged in, the fix for each gap, and the plan.

  install.py  the runtimes, libedgetpu, the compiler and Python packages, and the install plan
              (core/install/plan.py) for this platform; every check and its one-line fix
  devices.py  the accelerator itself: each Edge TPU's state, udev rules, containers, the kernel
              module, a Raspberry Pi 5's PCIe settings; `Check`, what every doctor check is
"""
