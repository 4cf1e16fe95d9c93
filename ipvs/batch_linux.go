//go:build linux

package ipvs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"syscall"

	cipvs "github.com/cloudflare/ipvs"
	"github.com/mdlayher/genetlink"
	"golang.org/x/sys/unix"
)

// The IPVS generic netlink family's commands and attributes (the kernel's
// include/uapi/linux/ip_vs.h), for the batch sender: cloudflare/ipvs
// sends one command per round trip and keeps its encoder to itself.
const (
	ipvsGenlVersion = 1

	ipvsCmdNewService = 1
	ipvsCmdSetService = 2
	ipvsCmdDelService = 3
	ipvsCmdNewDest    = 5
	ipvsCmdSetDest    = 6
	ipvsCmdDelDest    = 7

	ipvsCmdAttrService = 1
	ipvsCmdAttrDest    = 2

	ipvsSvcAttrAF        = 1
	ipvsSvcAttrProtocol  = 2
	ipvsSvcAttrAddr      = 3
	ipvsSvcAttrPort      = 4
	ipvsSvcAttrFwmark    = 5
	ipvsSvcAttrSchedName = 6
	ipvsSvcAttrFlags     = 7
	ipvsSvcAttrTimeout   = 8
	ipvsSvcAttrNetmask   = 9

	ipvsDestAttrAddr      = 1
	ipvsDestAttrPort      = 2
	ipvsDestAttrFwdMethod = 3
	ipvsDestAttrWeight    = 4
	ipvsDestAttrUThresh   = 5
	ipvsDestAttrLThresh   = 6
	ipvsDestAttrAF        = 11
	ipvsDestAttrTunType   = 13
	ipvsDestAttrTunPort   = 14
	ipvsDestAttrTunFlags  = 15
)

// Batch limits. The kernel handles the requests of one sendmsg(2) one after
// the other, each as if sent alone, and queues an answer for each that
// fails, and for the last, which asks for an acknowledgement, before
// sendmsg returns. An answer that does not fit the socket's receive buffer
// is dropped (ENOBUFS at the next read), so a batch holds no more commands
// than the buffer has room for errors: batchRcvBuf with SO_RCVBUFFORCE
// (CAP_NET_ADMIN), else what SO_RCVBUF grants, at errSkbSize each.
const (
	batchMaxCommands = 256
	batchMinCommands = 8
	batchMaxBytes    = 64 << 10 // well below the default send buffer (208 KiB)
	batchRcvBuf      = 1 << 20
	errSkbSize       = 2 << 10 // an error's buffer as the kernel counts it (truesize), rounded up
)

// errNoAnswer marks a command the kernel handled or not: its answer was
// lost.
var errNoAnswer = errors.New("no answer from the kernel: outcome unknown")

// nlBatch sends netlink requests several per sendmsg(2) on a socket of its
// own, in the network namespace of the thread that created it: IPVS
// commands over generic netlink (newNLBatch), addresses over route netlink
// (NetlinkAddresses). Every request but the last of a batch asks for no
// acknowledgement: the kernel answers only those that fail (netlink_rcv_skb
// acks an error always), so one read of the last one's acknowledgement
// tells that every request before it without an error took effect. Not
// safe for concurrent use (its owner serialises it).
type nlBatch struct {
	fd     int
	family uint16 // IPVS's generic netlink family, for run
	limit  int    // requests per batch
	seq    uint32
	buf    []byte // the batch being written
	rbuf   []byte
}

// newNLBatch opens a batch sender for IPVS's generic netlink family.
func newNLBatch() (*nlBatch, error) {
	c, err := genetlink.Dial(nil)
	if err != nil {
		return nil, err
	}
	f, err := c.GetFamily("IPVS")
	c.Close()
	if err != nil {
		return nil, err
	}
	b, err := dialBatch(unix.NETLINK_GENERIC)
	if err != nil {
		return nil, err
	}
	b.family = f.ID
	return b, nil
}

// dialBatch opens a netlink socket of protocol proto for batches.
func dialBatch(proto int) (*nlBatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// An error's answer without the request in it (Linux 4.3 and
	// later; without it each error is a few hundred bytes longer).
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, batchRcvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, batchRcvBuf)
	}
	rcv, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &nlBatch{
		fd:    fd,
		limit: min(max(rcv/errSkbSize, batchMinCommands), batchMaxCommands),
		rbuf:  make([]byte, 16<<10),
	}, nil
}

func (b *nlBatch) close() error { return unix.Close(b.fd) }

// run runs the commands of cmds whose errs[i] is nil, sets errs[i] to the
// error of cmds[i] (nil where it took effect) and reports how many round
// trips it took. describe wraps a command's errno as the single calls do.
func (b *nlBatch) run(cmds []Command, errs []error, describe func(Command, error) error) (trips int) {
	return b.send(errs, func(i int, buf []byte) (uint16, uint16, []byte, error) {
		buf, err := appendCommand(buf, cmds[i])
		return b.family, 0, buf, err
	}, func(i int, err error) error { return describe(cmds[i], err) })
}

// encoder appends the payload of request i to buf and returns its
// netlink message type and flags (beyond NLM_F_REQUEST).
type encoder func(i int, buf []byte) (typ, flags uint16, out []byte, err error)

// send sends the requests i of errs whose errs[i] is nil, as encode
// writes them, in batches, and sets errs[i] to the error of request i,
// described by describe (nil where it took effect). It reports the round
// trips it took.
func (b *nlBatch) send(errs []error, encode encoder, describe func(int, error) error) (trips int) {
	var pending []int // indices of the requests in b.buf, in order
	var first uint32
	start := func() {
		if b.seq > math.MaxUint32-2*batchMaxCommands {
			b.seq = 0 // so that a batch's sequence numbers never wrap
		}
		pending, b.buf, first = pending[:0], b.buf[:0], b.seq+1
	}
	flush := func() {
		if len(pending) > 0 {
			b.flush(pending, first, errs, describe)
			trips++
		}
		start()
	}
	start()
	for i := range errs {
		if errs[i] != nil {
			continue
		}
		at := len(b.buf)
		typ, flags, buf, err := encode(i, append(b.buf, make([]byte, unix.NLMSG_HDRLEN)...))
		if err != nil {
			b.buf = b.buf[:at]
			errs[i] = describe(i, err)
			continue
		}
		b.seq++
		// nlmsghdr: length, type, flags, sequence, port (the kernel's
		// to fill).
		binary.NativeEndian.PutUint32(buf[at:], uint32(len(buf)-at))
		binary.NativeEndian.PutUint16(buf[at+4:], typ)
		binary.NativeEndian.PutUint16(buf[at+6:], flags|unix.NLM_F_REQUEST)
		binary.NativeEndian.PutUint32(buf[at+8:], b.seq)
		binary.NativeEndian.PutUint32(buf[at+12:], 0)
		b.buf = buf
		pending = append(pending, i)
		if len(pending) >= b.limit || len(b.buf) >= batchMaxBytes {
			flush()
		}
	}
	flush()
	return trips
}

// flush sends b.buf, whose requests have sequence numbers first, first+1,
// ... for requests pending[0], pending[1], ..., and reads the answers.
func (b *nlBatch) flush(pending []int, first uint32, errs []error, describe func(int, error) error) {
	// The last request asks for an acknowledgement (nlmsghdr flags at
	// offset 6 of its header).
	last := lastMessage(b.buf)
	flags := binary.NativeEndian.Uint16(b.buf[last+6:])
	binary.NativeEndian.PutUint16(b.buf[last+6:], flags|unix.NLM_F_ACK)
	lastSeq := first + uint32(len(pending)) - 1
	if err := b.write(); err != nil {
		for _, i := range pending {
			errs[i] = describe(i, fmt.Errorf("send: %w", err))
		}
		return
	}
	answered := make([]bool, len(pending))
	lost := false
	for done := false; !done; {
		n, _, err := unix.Recvfrom(b.fd, b.rbuf, unix.MSG_DONTWAIT)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ENOBUFS:
			// Some answers were dropped: the ones still queued are
			// read, and no command without one counts as done.
			lost = true
			continue
		case err != nil:
			// EAGAIN: every answer is queued before sendmsg returns,
			// so the last one's was dropped too.
			lost = true
			done = true
			continue
		}
		msgs, perr := syscall.ParseNetlinkMessage(b.rbuf[:n])
		if perr != nil {
			lost = true
			continue
		}
		for _, m := range msgs {
			seq := m.Header.Seq
			if m.Header.Type != unix.NLMSG_ERROR || seq < first || seq > lastSeq || len(m.Data) < 4 {
				continue // not an answer of this batch
			}
			k := int(seq - first)
			answered[k] = true
			if errno := -int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
				errs[pending[k]] = describe(pending[k], syscall.Errno(errno))
			}
			if seq == lastSeq {
				done = true
			}
		}
	}
	if !lost {
		return
	}
	for k, i := range pending {
		if !answered[k] {
			errs[i] = describe(i, errNoAnswer)
		}
	}
}

func (b *nlBatch) write() error {
	for {
		err := unix.Sendto(b.fd, b.buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if err != unix.EINTR {
			return err
		}
	}
}

// lastMessage returns the offset of the last netlink message in buf.
func lastMessage(buf []byte) int {
	off := 0
	for {
		n := nlmsgAlign(int(binary.NativeEndian.Uint32(buf[off:])))
		if off+n >= len(buf) {
			return off
		}
		off += n
	}
}

func nlmsgAlign(n int) int { return (n + 3) &^ 3 }

// appendCommand appends c's generic netlink request (after its netlink
// header) to buf, as cloudflare/ipvs encodes its single calls.
func appendCommand(buf []byte, c Command) ([]byte, error) {
	var cmd uint8
	withDest := false
	switch c.Kind {
	case CmdAddService:
		cmd = ipvsCmdNewService
	case CmdUpdateService:
		cmd = ipvsCmdSetService
	case CmdDeleteService:
		cmd = ipvsCmdDelService
	case CmdAddDestination:
		cmd, withDest = ipvsCmdNewDest, true
	case CmdUpdateDestination:
		cmd, withDest = ipvsCmdSetDest, true
	case CmdDeleteDestination:
		cmd, withDest = ipvsCmdDelDest, true
	default:
		return nil, fmt.Errorf("unknown command %d", c.Kind)
	}
	// genlmsghdr: command, version, reserved.
	buf = append(buf, cmd, ipvsGenlVersion, 0, 0)
	svc := toLibService(c.Service)
	if c.Kind == CmdDeleteService || withDest {
		svc = libKey(c.Service.VirtualServiceKey)
	}
	buf = appendService(buf, svc)
	if withDest {
		d := c.Dest
		if c.Kind == CmdDeleteDestination {
			d = Destination{DestinationKey: d.DestinationKey}
		}
		buf = appendDest(buf, toLibDestination(d))
	}
	return buf, nil
}

// appendService appends the IPVS_CMD_ATTR_SERVICE attribute of s: every
// field, as cloudflare/ipvs sends it.
func appendService(buf []byte, s cipvs.Service) []byte {
	n := len(buf)
	buf = attrHeader(buf, ipvsCmdAttrService)
	buf = attrU16(buf, ipvsSvcAttrAF, uint16(s.Family))
	buf = attr(buf, ipvsSvcAttrSchedName, append([]byte(s.Scheduler), 0)...)
	flags := binary.NativeEndian.AppendUint32(nil, uint32(s.Flags))
	buf = attr(buf, ipvsSvcAttrFlags, append(flags, 0xff, 0xff, 0xff, 0xff)...)
	buf = attrU32(buf, ipvsSvcAttrTimeout, s.Timeout)
	switch {
	case s.Netmask.Is4():
		buf = attr(buf, ipvsSvcAttrNetmask, s.Netmask.AsSlice()...)
	case s.Netmask.Is6():
		buf = attrU32(buf, ipvsSvcAttrNetmask, uint32(s.Netmask.Bits()))
	}
	if s.FWMark != 0 {
		buf = attrU32(buf, ipvsSvcAttrFwmark, s.FWMark)
	} else {
		buf = attrU16(buf, ipvsSvcAttrProtocol, uint16(s.Protocol))
		buf = attr(buf, ipvsSvcAttrAddr, addrBytes(s.Address)...)
		buf = attr(buf, ipvsSvcAttrPort, byte(s.Port>>8), byte(s.Port))
	}
	return nested(buf, n)
}

// appendDest appends the IPVS_CMD_ATTR_DEST attribute of d, as
// cloudflare/ipvs sends it.
func appendDest(buf []byte, d cipvs.Destination) []byte {
	n := len(buf)
	buf = attrHeader(buf, ipvsCmdAttrDest)
	buf = attrU16(buf, ipvsDestAttrAF, uint16(d.Family))
	buf = attr(buf, ipvsDestAttrAddr, addrBytes(d.Address)...)
	buf = attr(buf, ipvsDestAttrPort, byte(d.Port>>8), byte(d.Port))
	buf = attrU32(buf, ipvsDestAttrFwdMethod, uint32(d.FwdMethod))
	buf = attrU32(buf, ipvsDestAttrWeight, d.Weight)
	buf = attrU32(buf, ipvsDestAttrUThresh, d.UpperThreshold)
	buf = attrU32(buf, ipvsDestAttrLThresh, d.LowerThreshold)
	buf = attr(buf, ipvsDestAttrTunType, uint8(d.TunnelType))
	buf = attr(buf, ipvsDestAttrTunPort, byte(d.TunnelPort>>8), byte(d.TunnelPort))
	buf = attrU16(buf, ipvsDestAttrTunFlags, uint16(d.TunnelFlags))
	return nested(buf, n)
}

func addrBytes(a netip.Addr) []byte {
	if a.Is4() {
		b := a.As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}

// attr appends a netlink attribute, padded to 4 bytes.
func attr(buf []byte, typ uint16, val ...byte) []byte {
	buf = binary.NativeEndian.AppendUint16(buf, uint16(4+len(val)))
	buf = binary.NativeEndian.AppendUint16(buf, typ)
	buf = append(buf, val...)
	for len(buf)%4 != 0 {
		buf = append(buf, 0)
	}
	return buf
}

func attrU16(buf []byte, typ, v uint16) []byte {
	return attr(buf, typ, binary.NativeEndian.AppendUint16(nil, v)...)
}

func attrU32(buf []byte, typ uint16, v uint32) []byte {
	return attr(buf, typ, binary.NativeEndian.AppendUint32(nil, v)...)
}

// attrHeader starts a nested attribute; nested sets its length once its
// attributes follow.
func attrHeader(buf []byte, typ uint16) []byte {
	buf = binary.NativeEndian.AppendUint16(buf, 0)
	return binary.NativeEndian.AppendUint16(buf, typ)
}

func nested(buf []byte, start int) []byte {
	binary.NativeEndian.PutUint16(buf[start:], uint16(len(buf)-start))
	return buf
}
