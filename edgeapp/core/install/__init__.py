"""What to install where, pure: Debian/os-release parsing, runtime and libedgetpu pairing, the
install plan, Linux setup facts for doctor."""
