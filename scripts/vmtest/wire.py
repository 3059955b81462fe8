"""What the vmtest host and guest sides must agree on (scripts/vmtest/host.py, guest.py)."""
# The guest's two NICs, in port order: the gen side's, then the sink side's.
GUEST_MACS = ("52:54:00:00:00:0a", "52:54:00:00:00:0b")
# The host ends of the taps: the gen side's and the sink side's, as the guest's neighbours.
HOST_MACS = ("02:00:00:00:0a:01", "02:00:00:00:0b:01")
# Every layout must forward on one of the booted topologies.
LAYOUTS = ("irq-core", "smt-sibling", "same-package", "remote-node", "spread", "explicit", "unpinned")


def toeplitz(key, data):
    """The Toeplitz hash of `data` under `key` (the RSS hash NICs and QEMU compute)."""
    k = int.from_bytes(key, "big")
    klen = len(key) * 8
    h = 0
    for i, byte in enumerate(data):
        for b in range(8):
            if byte & (0x80 >> b):
                h ^= (k >> (klen - 32 - (i * 8 + b))) & 0xFFFFFFFF
    return h
