# dataplane: `make demo` (install what is missing, build, run the main job on a netns testbed)
# and `make test` (the whole test suite). Both need root for the netns/XDP parts.
SHELL := /bin/bash
CARGO ?= cargo
DEB_PACKAGES := clang llvm libelf-dev zlib1g-dev pkg-config iproute2 ethtool iputils-ping curl \
	procps util-linux python3 libhwloc-dev libudev-dev traceroute iputils-tracepath iperf3 bird2 stress-ng man-db \
	prometheus valgrind

.PHONY: deps build test test-loaded loom stress sanitize vmtest vmtest-zc vmbench rebalance-compare instr demo fleet-demo latency latency-jumbo bench lint fmt clean fuzz fuzz-ci install

deps:
	@scripts/deps.sh $(DEB_PACKAGES)

build: deps
	$(CARGO) build --release --workspace

test: deps
	$(CARGO) test --workspace  # builds the dataplane binary that tests/ runs
	python3 -m unittest discover -s scripts/vmtest -p 'test_*.py'  # rebalance-compare's goals
	$(MAKE) loom
	python3 scripts/instr.py --guard bench/instr-baseline.json  # instructions per packet

# The whole suite beside a CPU load on both CPUs (stress-ng): outcomes must not depend on
# timing (readiness, not sleeps, decides them).
test-loaded: deps
	stress-ng --cpu $${LOAD_CPUS:-2} --timeout 3600s --quiet & load=$$!; \
	trap 'kill $$load 2>/dev/null' EXIT; $(MAKE) test

# The forwarding table's lock-free protocol under the loom model checker (fib::loom_tests:
# QSBR online/offline against reclaim, next-hop slots, extension and multipath groups).
loom:
	LOOM_MAX_PREEMPTIONS=3 scripts/at-least.sh 7 \
		$(CARGO) test --release -p dataplane --features loom --lib fib::loom_tests

# The churn oracle (readers against a BGP-like update stream, every answer checked against
# the versions its lookup spanned) for 10 minutes; make test runs it for 10 s.
stress:
	CHURN_SECS=$${CHURN_SECS:-600} scripts/at-least.sh 2 \
		$(CARGO) test --release -p dataplane --lib fib::churn -- --nocapture

# Miri on the table's unit tests, ThreadSanitizer on the churn oracle (nightly toolchain).
# About 30 minutes on 2 vCPUs: Miri 23 (the IPv6 brute-force test 16 of them), TSan 5.
sanitize:
	scripts/sanitize.sh

# The real-driver testbed: a QEMU guest (TCG) with 2 NUMA nodes, SMT and two multi-queue
# virtio-net NICs with MSI-X interrupts, traffic from the host's namespaces (scripts/vmtest/).
# QEMU itself is not among them: scripts/vmtest/qemu.sh unpacks bookworm-backports' QEMU 10
# under target/vm/qemu (eBPF RSS that libbpf 1.x loads; the igb device) and installs only the
# bookworm libraries it links.
VM_PACKAGES := busybox-static cpio xz-utils kmod
vmtest: build
	@scripts/deps.sh $(VM_PACKAGES)
	$(CARGO) test --release --no-run -p dataplane-tests --test kernel_vlan  # run in the guest
	scripts/vmtest/qemu.sh
	scripts/vmtest/build.sh
	scripts/vmtest/build.sh zc
	timeout 1800 python3 scripts/vmtest/host.py --kernels copy,zc

# Only the zero-copy guest: the newest Debian kernel from trixie-backports, through an apt
# configuration of the project's own under target/vm/apt, and a device with the DMA API and
# per-queue reset.
vmtest-zc: build
	@scripts/deps.sh $(VM_PACKAGES)
	scripts/vmtest/qemu.sh
	scripts/vmtest/build.sh zc
	timeout 1800 python3 scripts/vmtest/host.py --kernels zc

# The layouts matrix in the same guest (functional figures: the guest's CPUs are emulated).
vmbench: build
	@scripts/deps.sh $(VM_PACKAGES)
	scripts/vmtest/qemu.sh
	scripts/vmtest/build.sh
	timeout 1800 python3 scripts/vmtest/host.py --bench bench/out/vm-layouts

# Live RSS rebalancing against static RSS and tune's best layout, side by side in one boot
# of the guest (4 vCPUs, 4 queues; virtio-net rss=on,hash=on unless COMPARE_ARGS says
# otherwise, e.g. "--compare-nic igb --vcpu-quota 25" or "--rss-hash off"): summary,
# results and an SVG plot in bench/out/rebalance (docs/REBALANCE.md).
COMPARE_ARGS ?=
rebalance-compare: build
	@scripts/deps.sh $(VM_PACKAGES)
	scripts/vmtest/qemu.sh
	scripts/vmtest/build.sh
	scripts/vmtest/build.sh zc
	timeout 2400 python3 scripts/vmtest/host.py --compare bench/out/rebalance $(COMPARE_ARGS)

demo: build
	scripts/demo.sh

# Ping RTT (idle and under a UDP load of half the dataplane's rate) and iperf3 TCP (1 and 8
# streams, IPv4 and IPv6) through the kernel's forwarding and the dataplane in each idle mode,
# side by side in one run: bench/out/latency/latency.md, .json and rtt-cdf.svg. PROFILE=1 adds
# one TCP run per DUT under a system-wide perf record (profile-*.txt: where the CPU goes).
latency: build
	python3 scripts/latency.py --out bench/out/latency $(if $(PROFILE),--profile)

# The same with every testbed link at MTU 9000: TCP through the kernel and through the
# dataplane (AF_XDP multi-buffer chains) side by side: bench/out/latency-jumbo/.
latency-jumbo: build
	python3 scripts/latency.py --mtu 9000 --duts kernel,adaptive,busy --out bench/out/latency-jumbo

# Two appliances (dataplane + BIRD + `dataplane announce`) behind a BIRD upstream with ECMP and
# BFD, in namespaces: 30 s of paced UDP flows, appliance a's dataplane stalled (SIGSTOP) at
# 10 s and resumed at 20 s (FAULT=kill: SIGKILL and a restart; FAULT=link: its server link
# down and up; FAULT=bird: its BIRD stalled, for BFD to notice; FAULT=stale: its health
# checks stopped while its endpoint answers); the table,
# bench/out/fleet/fleet.svg and .json (docs/FLEET.md).
fleet-demo: build
	target/release/dataplane fleet-demo --fault $${FAULT:-stop} --out bench/out/fleet

# Instructions per packet under callgrind: every ring-bench cell (the poller's own and the
# emulated port's apart) beside testpmd io and macswap and the DPDK L3 anchor (bench/c/),
# fwd-micro, the goals and their ratios; bench/out/instr/instr.json. About 10 minutes.
INSTR_PACKAGES := valgrind dpdk dpdk-dev
instr: build
	@scripts/deps.sh $(INSTR_PACKAGES)
	python3 scripts/instr.py --out bench/out/instr

bench: build
	for m in layouts ablation l2-vs-l3 batch; do \
		target/release/dataplane bench --matrix bench/matrices/$$m.toml --out bench/out/$$m || exit 1; \
	done
	target/release/fwd-micro
	mkdir -p bench/out/ring bench/out/ring-ablation
	target/release/ring-bench > bench/out/ring/summary.md
	target/release/ring-bench --ablation 1 > bench/out/ring-ablation/summary.md

lint: deps
	python3 scripts/modgraph.py --self-test
	python3 scripts/modgraph.py --check docs/ARCHITECTURE.md
	python3 scripts/limits.py --self-test
	python3 scripts/limits.py
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy -p dataplane --features loom --lib --tests -- -D warnings
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check
	$(CARGO) clippy --manifest-path fuzz/Cargo.toml -- -D warnings

# The per-packet decision and the config parser under libFuzzer (cargo-fuzz, nightly): 10 million executions per target by
# default (RUNS=..., SECONDS_MAX=... to change). Fails on a crash or a failed assertion.
fuzz: deps
	scripts/fuzz.sh

# What CI fuzzes: each target for a bounded time (from the committed seeds).
fuzz-ci: deps
	SECONDS_MAX=$${SECONDS_MAX:-60} scripts/fuzz.sh

# The binary, its man pages and shell completions under $(DESTDIR)$(PREFIX).
PREFIX ?= /usr/local
install: build
	install -D -m 0755 target/release/dataplane $(DESTDIR)$(PREFIX)/bin/dataplane
	mkdir -p $(DESTDIR)$(PREFIX)/share/man/man1
	target/release/dataplane manpages $(DESTDIR)$(PREFIX)/share/man/man1 >/dev/null
	mkdir -p $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	target/release/dataplane completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/dataplane
	target/release/dataplane completions zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_dataplane
	target/release/dataplane completions fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/dataplane.fish

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
