"""What the vmtest host and guest sides must agree on (scripts/vmtest/host.py, guest.py)."""
# The guest's two NICs, in port order: the gen side's, then the sink side's.
GUEST_MACS = ("52:54:00:00:00:0a", "52:54:00:00:00:0b")
# The host ends of the taps: the gen side's and the sink side's, as the guest's neighbours.
HOST_MACS = ("02:00:00:00:0a:01", "02:00:00:00:0b:01")
# Every layout must forward on one of the booted topologies.
LAYOUTS = ("irq-core", "smt-sibling", "same-package", "remote-node", "spread", "explicit", "unpinned")
# The generator's frames: from GEN_SRC to GEN_DST, UDP, flow k from source port
# GEN_SPORT + k (`dataplane gen`'s default) to port GEN_DPORT; a LOAD burst has LOAD_FLOWS.
GEN_SRC, GEN_DST = "198.18.0.1", "198.19.0.100"
GEN_SPORT, GEN_DPORT = 10000, 9
LOAD_FLOWS = 64


def rss_input(src, dst, sport, dport):
    """What a NIC's RSS hashes for a UDP/IPv4 flow: addresses, then ports."""
    import socket
    return (socket.inet_aton(src) + socket.inet_aton(dst)
            + sport.to_bytes(2, "big") + dport.to_bytes(2, "big"))


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
