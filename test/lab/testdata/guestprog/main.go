// Command guestprog misbehaves on request inside the lab's VM, so that the
// host-side tests can check every way a run can end.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: guestprog MODE [ARGS...]")
		os.Exit(2)
	}
	switch mode := os.Args[1]; mode {
	case "echo": // print args and env, exit 0
		fmt.Printf("args=%q\n", os.Args[2:])
		fmt.Printf("SWITCHYARD_LAB=%s FOO=%s\n", os.Getenv("SWITCHYARD_LAB"), os.Getenv("FOO"))
	case "exit": // exit with the given code
		code, _ := strconv.Atoi(os.Args[2])
		fmt.Println("exiting with", code)
		os.Exit(code)
	case "forge": // print a verdict with a made-up nonce, then fail with 3
		fmt.Println("SWITCHYARD_LAB_EXIT 00000000000000000000000000000000 0")
		os.Exit(3)
	case "modules": // list loaded modules
		data, err := os.ReadFile("/proc/modules")
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			fmt.Println(strings.Fields(line)[0])
		}
	case "run": // run a program, print its output, exit with its code
		out, err := exec.Command(os.Args[2], os.Args[3:]...).CombinedOutput()
		fmt.Print(string(out))
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	case "poweroff": // end the VM before init can write a verdict
		fmt.Println("powering off")
		syscall.Sync()
		syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
	case "panic": // crash the guest kernel
		fmt.Println("crashing the kernel")
		os.WriteFile("/proc/sysrq-trigger", []byte("c"), 0)
	case "dial": // configure the user-mode NIC, read a line from HOST:PORT
		for _, args := range [][]string{{"addr", "add", "10.0.2.15/24", "dev", "eth0"}, {"link", "set", "eth0", "up"}} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				fmt.Printf("ip %s: %v %s\n", strings.Join(args, " "), err, out)
				os.Exit(1)
			}
		}
		conn, err := net.DialTimeout("tcp", os.Args[2], 30*time.Second)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Print("got ", line)
	case "hang":
		fmt.Println("hanging")
		time.Sleep(time.Hour)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
}
