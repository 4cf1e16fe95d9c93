#!/bin/sh
# The node's init, run by tini (PID 1) on the ext4 root from the host's
# 9p share (/mnt/host, test/node writes it each boot): mounts, modules,
# network, containerd, the images, the kubelet, then the command agent.
# Settings come from /mnt/host/node.env. Stage markers with the guest's
# uptime go to /mnt/host/state/, its log to /dev/console.
exec >/dev/console 2>&1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
. /mnt/host/node.env
state=/mnt/host/state
mkdir -p $state
uptime() { cut -d' ' -f1 /proc/uptime; }
mark() {
	echo "node init: $1 at uptime $(uptime)s"
	echo "$(uptime)" >$state/$1
}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mark init
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount --make-rshared /
# The disk file may have grown (test/node's diskGrowth): so does the file
# system, online.
resize2fs /dev/vda >/dev/null 2>&1 || echo "node init: resize2fs /dev/vda failed"
# Every controller for the kubelet's cgroups (cgroup v2, cgroupfs driver).
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
	echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control
done
# No dummy0 at load: the NIC is found by its MAC anyway, and a service
# proxy makes its own dummy link.
echo "options dummy numdummies=0" >/etc/modprobe.d/switchyard-node.conf
modprobe -a $MODULES || echo "node init: modprobe failed"
busybox sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
busybox hostname "$NODE_NAME"
echo "$NODE_NAME" >/etc/hostname
grep -q "$NODE_NAME" /etc/hosts || echo "127.0.1.1 $NODE_NAME" >>/etc/hosts
echo "nameserver $HOST_IP" >/etc/resolv.conf
[ -s /etc/machine-id ] || cat /proc/sys/kernel/random/uuid | tr -d - >/etc/machine-id
ip link set lo up
nic=
for d in /sys/class/net/*; do
	[ "$(cat $d/address)" = "$NODE_MAC" ] && nic=${d##*/}
done
[ -n "$nic" ] || echo "node init: no NIC with address $NODE_MAC"
ip addr add "$NODE_IP/$PREFIX_LEN" dev "$nic"
ip link set "$nic" up
ip route add default via "$HOST_IP"
# The other guests' pod networks, each via its guest (CIDR=VIA): one L2,
# no overlay.
for r in $ROUTES; do
	ip route add "${r%%=*}" via "${r#*=}" dev "$nic" || echo "node init: route $r failed"
done
mark network

mkdir -p /etc/containerd /etc/cni/net.d /var/lib/switchyard-node/imported /usr/local/bin
cp /mnt/host/containerd.toml /etc/containerd/config.toml
rm -f /etc/cni/net.d/*
cp /mnt/host/cni.conflist /etc/cni/net.d/10-lab.conflist
(while :; do containerd >>/var/log/containerd.log 2>&1; sleep 1; done) &
i=0
until ctr version >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 600 ] || { echo "node init: containerd did not start"; break; }
	sleep 0.2
done
mark containerd

# import_image NAME=REF: a docker archive of the share once per disk (the
# names carry a content hash), again when containerd lost REF (the
# kubelet's eviction manager deletes images under disk pressure).
import_image() {
	name=${1%%=*} ref=${1#*=}
	if [ -e /var/lib/switchyard-node/imported/$name ] && ctr -n k8s.io images ls -q | grep -q "$ref\$"; then
		return 0
	fi
	if ctr -n k8s.io images import --platform linux/amd64 /mnt/host/images/$name.tar >/dev/null; then
		touch /var/lib/switchyard-node/imported/$name
		echo "node init: imported $name at uptime $(uptime)s"
	else
		echo "node init: import $name failed"
		echo "$name" >>$state/import-failed
	fi
}
for name in $FIRST_IMAGES; do import_image $name; done
mark sandbox-image

cmp -s /mnt/host/bin/kubelet /usr/local/bin/kubelet || cp /mnt/host/bin/kubelet /usr/local/bin/kubelet
mkdir -p /var/lib/kubelet /var/log/pods
(while :; do
	kubelet --config=/mnt/host/kubelet.yaml --kubeconfig=/mnt/host/kubelet.kubeconfig \
		--node-ip="$NODE_IP" --hostname-override="$NODE_NAME" --v=1 >>/var/log/kubelet.log 2>&1
	sleep 2
done) &
mark kubelet

(for name in $IMAGES; do import_image $name; done; mark images) &

# The command agent: the host drops agent/ID.sh, the guest runs it with
# output to ID.out and the exit status to ID.rc (written last).
agent=/mnt/host/agent
mkdir -p $agent
mark agent
while :; do
	for f in $agent/*.sh; do
		[ -e "$f" ] || continue
		id=${f%.sh}
		mv "$f" "$id.run" || continue
		(cd /root && sh "$id.run" >"$id.out" 2>&1 </dev/null; echo $? >"$id.rc.tmp"; mv "$id.rc.tmp" "$id.rc") &
	done
	sleep 0.2
done
