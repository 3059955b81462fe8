//! Why a frame was not forwarded: one reason per check, each with its counter, its name in
//! metrics and reports, and the ICMP error it calls for, if any.
/// Why a frame was not forwarded. The discriminant indexes the per-poller drop counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Shorter than the headers its EtherType promises (includes zero-length L3 payloads).
    Truncated = 0,
    /// An EtherType this dataplane does not forward (not IPv4/IPv6).
    NotIp,
    /// 802.1Q/802.1ad tagged: the steering program leaves these to the kernel (VLAN
    /// sub-interfaces); one that reaches a socket anyway is dropped.
    VlanTagged,
    /// Ethernet destination is not the ingress port's MAC (another host's, or broadcast /
    /// multicast): a router forwards only frames addressed to it (RFC 1812 5.3.4).
    NotForUs,
    /// Ethernet source is a multicast address (no station sends from one, IEEE 802).
    MulticastSource,
    /// IP version field does not match the EtherType.
    BadVersion,
    /// IPv4 header length below 5 words or past the frame.
    BadIhl,
    /// IPv4 total length / IPv6 payload length points past the end of the frame, or below the header.
    BadLength,
    /// IPv4 header checksum does not verify (RFC 1812 5.2.2).
    BadChecksum,
    /// IPv4 with options: the steering program hands these to the kernel's slow path (RFC 791
    /// record route / timestamp processing, source routes refused); one that reaches a socket
    /// anyway is dropped.
    Ipv4Options,
    /// IPv6 extension header chain longer than the fast path walks (8 headers, or past the
    /// first 256 bytes after the fixed header), truncated, or with hop-by-hop not first.
    Ipv6ExtChain,
    /// IPv6 routing header type 0 (deprecated, RFC 5095).
    Ipv6RoutingType0,
    /// Source address that must not be forwarded (RFC 1812 5.3.7, RFC 4291, RFC 6890):
    /// IPv4 0/8, 127/8, 224/4, 240/4; IPv6 ::, ::1, ff00::/8, IPv4-mapped.
    MartianSource,
    /// Destination that is not routed here: IPv4 0/8, 127/8, 224/4 (multicast), 240/4 and
    /// 255.255.255.255; IPv6 ::, ::1, ff00::/8, IPv4-mapped.
    MartianDestination,
    /// IPv6 link-local (fe80::/10) source or destination: never forwarded off the link
    /// (RFC 4291 2.5.6).
    LinkLocal,
    /// TTL / hop limit would reach zero (ICMP time exceeded).
    TtlExceeded,
    /// No route to the destination (ICMP destination unreachable: network / no route).
    NoRoute,
    /// A route, but its neighbour (MAC) could not be resolved, or, with static neighbours,
    /// is not configured (ICMP host / address unreachable).
    NoNeighbour,
    /// A route, and the kernel was asked to resolve its neighbour (ARP / ND) but has not yet
    /// answered: dropped without an ICMP error, as the kernel drops (or queues) while
    /// resolving; forwarding starts when the entry appears.
    Resolving,
    /// A blackhole route: dropped silently.
    Blackhole,
    /// An unreachable route (ICMP destination unreachable: host / no route).
    Unreachable,
    /// A prohibit route (ICMP destination unreachable: administratively prohibited).
    Prohibited,
    /// The route's egress is an interface the dataplane does not own: the kernel would
    /// forward it, the fast path cannot.
    ForeignRoute,
    /// The egress port's link is down: no transmit attempted.
    LinkDown,
    /// Larger than the egress port's MTU: IPv4 with DF and IPv6 get ICMP fragmentation
    /// needed / packet too big; IPv4 without DF is fragmented, and counted here only when
    /// it could not be (no free frames for its fragments).
    TooBig,
    /// The egress TX ring had no room for the frame.
    TxRingFull,
    /// The RX descriptor pointed outside the UMEM (kernel/driver bug or corrupted ring).
    InvalidDescriptor,
    /// Mode `drop`: everything is dropped on purpose.
    DropMode,
    /// Put on a TX ring, but the kernel did not send it: the egress device refused it (down
    /// or being deleted, or its veth peer's backlog full). Also in `tx_packets` and
    /// `tx_lost`.
    TxRefused,
    /// A multi-buffer packet whose last buffer (the one without XDP_PKT_CONTD) was not on
    /// the RX ring: the kernel publishes whole packets, so only a broken ring shows this.
    /// Its buffers are given back, and what follows it up to a packet's end is dropped as
    /// `chain_rest`.
    ChainUnterminated,
    /// A multi-buffer packet of more buffers than the kernel's limit (MAX_SKB_FRAGS + 1,
    /// 18): more than any port hands over, and more than an egress takes.
    ChainTooLong,
    /// A buffer of a multi-buffer packet with length 0.
    ChainEmptyBuffer,
    /// A multi-buffer packet whose first buffer is too short to hold its headers (they
    /// are read and rewritten there).
    ChainShortHead,
    /// The buffers read after a chain dropped as `chain_unterminated`, up to the first
    /// that ends a packet: that chain's rest, given back. Counted as a packet of its own,
    /// because nothing tells a rest from a next packet that came in its place (a rest that
    /// never came): whichever it was, it is received and dropped, never forwarded.
    ChainRest,
}

impl DropReason {
    /// Number of reasons (size of a counter array).
    pub const COUNT: usize = 34;
    /// All reasons in discriminant order.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::Truncated,
        DropReason::NotIp,
        DropReason::VlanTagged,
        DropReason::NotForUs,
        DropReason::MulticastSource,
        DropReason::BadVersion,
        DropReason::BadIhl,
        DropReason::BadLength,
        DropReason::BadChecksum,
        DropReason::Ipv4Options,
        DropReason::Ipv6ExtChain,
        DropReason::Ipv6RoutingType0,
        DropReason::MartianSource,
        DropReason::MartianDestination,
        DropReason::LinkLocal,
        DropReason::TtlExceeded,
        DropReason::NoRoute,
        DropReason::NoNeighbour,
        DropReason::Resolving,
        DropReason::Blackhole,
        DropReason::Unreachable,
        DropReason::Prohibited,
        DropReason::ForeignRoute,
        DropReason::LinkDown,
        DropReason::TooBig,
        DropReason::TxRingFull,
        DropReason::InvalidDescriptor,
        DropReason::DropMode,
        DropReason::TxRefused,
        DropReason::ChainUnterminated,
        DropReason::ChainTooLong,
        DropReason::ChainEmptyBuffer,
        DropReason::ChainShortHead,
        DropReason::ChainRest,
    ];

    /// True for the drops a router answers with an ICMP error (RFC 1812 5.2.7, 5.3.1;
    /// RFC 4443 3): time exceeded, no route, no neighbour, too big.
    #[inline(always)]
    pub(crate) fn calls_for_icmp(self) -> bool {
        matches!(
            self,
            DropReason::TtlExceeded
                | DropReason::NoRoute
                | DropReason::NoNeighbour
                | DropReason::Unreachable
                | DropReason::Prohibited
                | DropReason::TooBig
        )
    }

    /// Stable snake_case name, used in stats output and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::NotIp => "not_ip",
            DropReason::VlanTagged => "vlan_tagged",
            DropReason::NotForUs => "not_for_us",
            DropReason::MulticastSource => "multicast_source",
            DropReason::BadVersion => "bad_version",
            DropReason::BadIhl => "bad_ihl",
            DropReason::BadLength => "bad_length",
            DropReason::BadChecksum => "bad_checksum",
            DropReason::Ipv4Options => "ipv4_options",
            DropReason::Ipv6ExtChain => "ipv6_ext_chain",
            DropReason::Ipv6RoutingType0 => "ipv6_routing_type0",
            DropReason::MartianSource => "martian_source",
            DropReason::MartianDestination => "martian_destination",
            DropReason::LinkLocal => "link_local",
            DropReason::TtlExceeded => "ttl_exceeded",
            DropReason::NoRoute => "no_route",
            DropReason::NoNeighbour => "no_neighbour",
            DropReason::Resolving => "resolving",
            DropReason::Blackhole => "blackhole",
            DropReason::Unreachable => "unreachable",
            DropReason::Prohibited => "prohibited",
            DropReason::ForeignRoute => "foreign_route",
            DropReason::LinkDown => "link_down",
            DropReason::TooBig => "too_big",
            DropReason::TxRingFull => "tx_ring_full",
            DropReason::InvalidDescriptor => "invalid_descriptor",
            DropReason::DropMode => "drop_mode",
            DropReason::TxRefused => "tx_refused",
            DropReason::ChainUnterminated => "chain_unterminated",
            DropReason::ChainTooLong => "chain_too_long",
            DropReason::ChainEmptyBuffer => "chain_empty_buffer",
            DropReason::ChainShortHead => "chain_short_head",
            DropReason::ChainRest => "chain_rest",
        }
    }
}
