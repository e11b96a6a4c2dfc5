package live

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/stemdot/stemdot/errs"
)

// Protocol is a detector stream protocol, registered by its package (live/merlin,
// live/dectris; import live/detectors for all of them).
type Protocol struct {
	// Scheme is the source's URL scheme: "merlin" for merlin://HOST[:PORT].
	Scheme string
	// DefaultPort is the port of a source that names none; 0: Open gets the host alone,
	// and the protocol picks the port (e.g. by its version).
	DefaultPort int
	// Describe is one line for help texts.
	Describe string
	// Params are the keys of the protocol's own options (Options.Params).
	Params []string
	// Open returns a receiver of the detector at host:port, or host (bracketed if an IPv6
	// address) when the source names no port and DefaultPort is 0; not connected yet:
	// Receiver.Start connects.
	Open func(hostPort string, opt Options) (Receiver, error)
}

// Options tell a receiver how to take part in the acquisition.
type Options struct {
	// Active configures, arms and starts the detector's acquisition of Frames frames
	// (Merlin's control port, DECTRIS's SIMPLON API), and stops it when the run ends
	// early; passive (the default) only listens for an acquisition that someone else
	// starts.
	Active bool
	// Frames is the number of frames an active acquisition takes (the scan's
	// positions).
	Frames int
	// Params are the protocol's own options, by key (e.g. DECTRIS's stream version),
	// as the protocol's package documents them; a key it does not know is refused.
	Params map[string]string
	// Shared receives a share of a stream that is dealt out to several receivers in turn
	// (a DECTRIS detector's ZeroMQ PUSH socket, with one PULL socket per node): the
	// receiver implements Sharer. A protocol whose stream cannot be shared refuses it
	// (errs.Argument).
	Shared bool
}

var (
	protoMu   sync.Mutex
	protocols = map[string]Protocol{}
)

// Register makes a protocol known to Open; registering a scheme twice panics.
func Register(p Protocol) {
	protoMu.Lock()
	defer protoMu.Unlock()
	if _, dup := protocols[p.Scheme]; dup {
		panic("live: protocol " + p.Scheme + " registered twice")
	}
	protocols[p.Scheme] = p
}

// Protocols returns the registered protocols, by scheme.
func Protocols() []Protocol {
	protoMu.Lock()
	defer protoMu.Unlock()
	var list []Protocol
	for _, p := range protocols {
		list = append(list, p)
	}
	slices.SortFunc(list, func(a, b Protocol) int { return strings.Compare(a.Scheme, b.Scheme) })
	return list
}

// Open returns the receiver of source, SCHEME://HOST[:PORT] (e.g. merlin://127.0.0.1,
// dectris://10.0.0.5:80), and the source with its port. Errors (errs.Argument) name the
// source and the schemes known.
func Open(source string, opt Options) (Receiver, string, error) {
	u, err := url.Parse(source)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return nil, "", errs.New(errs.Argument, "live: source %q: want SCHEME://HOST[:PORT] with scheme %s", source, schemes())
	}
	protoMu.Lock()
	p, ok := protocols[strings.ToLower(u.Scheme)]
	protoMu.Unlock()
	if !ok {
		return nil, "", errs.New(errs.Argument, "live: source %q: unknown scheme %q: want %s", source, u.Scheme, schemes())
	}
	port := u.Port()
	if port == "" && p.DefaultPort > 0 {
		port = strconv.Itoa(p.DefaultPort)
	} else if n, err := strconv.Atoi(port); port != "" && (err != nil || n < 1 || n > 65535) {
		return nil, "", errs.New(errs.Argument, "live: source %q: port %q is not 1 to 65535", source, port)
	}
	hostPort := u.Host
	if port != "" {
		hostPort = net.JoinHostPort(u.Hostname(), port)
	}
	rcv, err := p.Open(hostPort, opt)
	if err != nil {
		return nil, "", err
	}
	return rcv, fmt.Sprintf("%s://%s", p.Scheme, hostPort), nil
}

// schemes lists the registered schemes for messages: "dectris or merlin".
func schemes() string {
	var s []string
	for _, p := range Protocols() {
		s = append(s, p.Scheme)
	}
	switch len(s) {
	case 0:
		return "(none registered: import live/detectors)"
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
