#!/bin/sh
# /init of test/node's small initramfs (busybox and the modules below):
# mounts the node's ext4 disk and the host's 9p share, then switches root
# to the disk, where tini runs the node's init from the share.
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() {
	echo "node boot: $*" >/dev/console
	poweroff -f
}
modprobe -a $(cat /etc/lab/modules) || fail "modprobe failed"
i=0
while [ ! -b /dev/vda ]; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "no /dev/vda after 20 s"
	sleep 0.1
done
mkdir -p /newroot
mount -t ext4 -o rw,noatime /dev/vda /newroot || fail "mount /dev/vda"
mkdir -p /newroot/mnt/host
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 host /newroot/mnt/host || fail "mount the 9p share"
read up idle </proc/uptime
echo "node boot: switching root at uptime ${up}s" >/dev/console
mount --move /dev /newroot/dev
umount /proc /sys
exec switch_root /newroot /usr/bin/tini -s -- /bin/sh /mnt/host/init.sh
