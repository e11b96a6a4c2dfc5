package affinity

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fake returns a Source on the fake trees testdata/<sys>/sys and testdata/<cgroup>
// (cgroup "" for none), with the allowed CPUs given.
func fake(sys, cgroup string, allowed ...int) Source {
	src := Source{SysRoot: filepath.Join("testdata", sys, "sys"), Allowed: allowed}
	if allowed == nil {
		src.Allowed = []int{}
	}
	if cgroup != "" {
		src.CgroupRoot = filepath.Join("testdata", cgroup, "cgroup")
		src.ProcCgroup = filepath.Join("testdata", cgroup, "proc_cgroup")
	}
	return src
}

func cpuRange(lo, hi int) []int {
	var cpus []int
	for c := lo; c <= hi; c++ {
		cpus = append(cpus, c)
	}
	return cpus
}

func TestDetectFromFakeTrees(t *testing.T) {
	smtCores := []Core{
		{Key: 0, Package: 0, CoreID: 0, Node: 0, CPUs: []int{0, 4}},
		{Key: 1, Package: 0, CoreID: 1, Node: 0, CPUs: []int{1, 5}},
		{Key: 2, Package: 0, CoreID: 2, Node: 0, CPUs: []int{2, 6}},
		{Key: 3, Package: 0, CoreID: 3, Node: 0, CPUs: []int{3, 7}},
	}
	for _, tc := range []struct {
		name string
		src  Source
		want Topology
	}{
		{
			name: "SMT 4 cores x 2 threads, no quota (cpu.max max)",
			src:  fake("smt", "cgroup_v2_max", cpuRange(0, 7)...),
			want: Topology{Allowed: cpuRange(0, 7), Cores: smtCores, Usable: 4},
		},
		{
			name: "SMT, cgroup v2 quota 1.5 CPUs",
			src:  fake("smt", "cgroup_v2_quota", cpuRange(0, 7)...),
			want: Topology{Allowed: cpuRange(0, 7), Cores: smtCores, Usable: 2, Quota: 1.5,
				QuotaFile: filepath.Join("testdata", "cgroup_v2_quota", "cgroup", "kubepods", "pod1", "ctr", "cpu.max")},
		},
		{
			name: "allowed beyond the online CPUs",
			src:  fake("smt", "", cpuRange(0, 15)...),
			want: Topology{Allowed: cpuRange(0, 7), Cores: smtCores, Usable: 4},
		},
		{
			name: "two sockets with the same core_ids, cgroup v1 quota 2.5 CPUs on the parent",
			src:  fake("two_sockets", "cgroup_v1_quota", cpuRange(0, 7)...),
			want: Topology{
				Allowed: cpuRange(0, 7),
				Cores: []Core{
					{Key: 0, Package: 0, CoreID: 0, Node: 0, CPUs: []int{0, 4}},
					{Key: 1, Package: 0, CoreID: 1, Node: 0, CPUs: []int{1, 5}},
					{Key: 2, Package: 1, CoreID: 0, Node: 1, CPUs: []int{2, 6}},
					{Key: 3, Package: 1, CoreID: 1, Node: 1, CPUs: []int{3, 7}},
				},
				Quota: 2.5, Usable: 3,
				QuotaFile: filepath.Join("testdata", "cgroup_v1_quota", "cgroup", "cpu,cpuacct", "docker", "cpu.cfs_quota_us"),
			},
		},
		{
			name: "offline CPUs 3 and 6",
			src:  fake("offline", "", cpuRange(0, 7)...),
			want: Topology{
				Allowed: []int{0, 1, 2, 4, 5, 7},
				Cores: []Core{
					{Key: 0, Package: 0, CoreID: 0, Node: 0, CPUs: []int{0, 4}},
					{Key: 1, Package: 0, CoreID: 1, Node: 0, CPUs: []int{1, 5}},
					{Key: 2, Package: 0, CoreID: 2, Node: 0, CPUs: []int{2}},
					{Key: 7, Package: 0, CoreID: 3, Node: 0, CPUs: []int{7}},
				},
				Usable: 4,
			},
		},
		{
			name: "cpuset 2,3,6: core 3 keeps Key 3 with sibling 7 not allowed",
			src:  fake("smt", "", 6, 3, 2),
			want: Topology{
				Allowed: []int{2, 3, 6},
				Cores: []Core{
					{Key: 2, Package: 0, CoreID: 2, Node: 0, CPUs: []int{2, 6}},
					{Key: 3, Package: 0, CoreID: 3, Node: 0, CPUs: []int{3}},
				},
				Usable: 2,
			},
		},
		{
			name: "cpuset 4,5: keyed by the lowest sibling, allowed or not",
			src:  fake("smt", "cgroup_v2_quota", 4, 5),
			want: Topology{
				Allowed: []int{4, 5},
				Cores: []Core{
					{Key: 0, Package: 0, CoreID: 0, Node: 0, CPUs: []int{4}},
					{Key: 1, Package: 0, CoreID: 1, Node: 0, CPUs: []int{5}},
				},
				Quota: 1.5, Usable: 2,
				QuotaFile: filepath.Join("testdata", "cgroup_v2_quota", "cgroup", "kubepods", "pod1", "ctr", "cpu.max"),
			},
		},
		{
			name: "no topology files, v1 container quota 0.5 CPUs at the mount root",
			src:  fake("no_topology", "cgroup_v1_container", cpuRange(0, 3)...),
			want: Topology{
				Allowed: cpuRange(0, 3),
				Cores: []Core{
					{Key: 0, Package: 0, CoreID: 0, Node: -1, CPUs: []int{0}},
					{Key: 1, Package: 0, CoreID: 1, Node: -1, CPUs: []int{1}},
					{Key: 2, Package: 0, CoreID: 2, Node: -1, CPUs: []int{2}},
					{Key: 3, Package: 0, CoreID: 3, Node: -1, CPUs: []int{3}},
				},
				Quota: 0.5, Usable: 1,
				QuotaFile: filepath.Join("testdata", "cgroup_v1_container", "cgroup", "cpu", "cpu.cfs_quota_us"),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DetectFrom(tc.src)
			require.NoError(t, err)
			assert.Equal(t, tc.want, *got)
		})
	}
}

func TestDetectFromProcCgroupContents(t *testing.T) {
	for _, cgroup := range []string{"cgroup_v2_quota", "cgroup_v1_quota", "cgroup_v1_container", "cgroup_v2_max"} {
		src := fake("smt", cgroup, 0, 1, 2, 3)
		fromPath, err := DetectFrom(src)
		require.NoError(t, err)
		contents, err := os.ReadFile(src.ProcCgroup)
		require.NoError(t, err)
		src.ProcCgroup = string(contents)
		fromContents, err := DetectFrom(src)
		require.NoError(t, err)
		assert.Equal(t, fromPath, fromContents, cgroup)
	}
}

// cgroupTree writes a cgroup v2 tree with cpu.max on the process's cgroup /a/b and
// returns a Source on the smt machine using it.
func cgroupTree(t *testing.T, cpuMax string) Source {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "a", "b", "cpu.max"), []byte(cpuMax+"\n"), 0o644))
	src := fake("smt", "", cpuRange(0, 7)...)
	src.CgroupRoot, src.ProcCgroup = root, "0::/a/b\n"
	return src
}

func TestDetectFromQuota(t *testing.T) {
	for _, tc := range []struct {
		cpuMax     string
		wantQuota  float64
		wantUsable int
	}{
		{"200000 100000", 2, 2}, // exactly 2 CPUs: no rounding up
		{"200001 100000", 2.00001, 3},
		{"800000 100000", 8, 4}, // more than the 4 cores
		{"25000 50000", 0.5, 1}, // another period
		{"150000", 1.5, 2},      // period omitted: the default 100000
		{"max", 0, 4},
	} {
		got, err := DetectFrom(cgroupTree(t, tc.cpuMax))
		require.NoError(t, err, tc.cpuMax)
		assert.InDelta(t, tc.wantQuota, got.Quota, 1e-12, tc.cpuMax)
		assert.Equal(t, tc.wantUsable, got.Usable, tc.cpuMax)
	}
}

func TestDetectFromErrors(t *testing.T) {
	badSys := func(t *testing.T, file, contents string) Source {
		root := t.TempDir()
		require.NoError(t, os.CopyFS(root, os.DirFS(filepath.Join("testdata", "smt"))))
		require.NoError(t, os.WriteFile(filepath.Join(root, "sys", "devices", "system", "cpu", file), []byte(contents), 0o644))
		return Source{SysRoot: filepath.Join(root, "sys"), Allowed: cpuRange(0, 7)}
	}
	for _, tc := range []struct {
		name    string
		src     func(t *testing.T) Source
		wantErr []string
	}{
		{"allowed CPUs all offline", func(*testing.T) Source { return fake("offline", "", 3, 6) },
			[]string{"none of the allowed CPUs 3,6 is online", "0-2,4-5,7"}},
		{"no allowed CPU", func(*testing.T) Source { return fake("no_topology", "") },
			[]string{"the allowed CPU set is empty"}},
		{"negative allowed CPU", func(*testing.T) Source { return fake("smt", "", 0, -2) },
			[]string{"allowed CPU -2 is not a CPU id"}},
		{"malformed online", func(t *testing.T) Source { return badSys(t, "online", "0-x\n") },
			[]string{"online", `item "0-x"`}},
		{"malformed core_id", func(t *testing.T) Source { return badSys(t, "cpu5/topology/core_id", "five\n") },
			[]string{"cpu5/topology/core_id", `"five" is not an integer`}},
		{"cpu missing from its siblings", func(t *testing.T) Source { return badSys(t, "cpu5/topology/thread_siblings_list", "1\n") },
			[]string{"cpu5 is missing from its own thread_siblings_list"}},
		{"siblings in different cores", func(t *testing.T) Source { return badSys(t, "cpu5/topology/core_id", "3\n") },
			[]string{"cpu1 and cpu5 are thread siblings but in different cores"}},
		{"malformed cpu.max quota", func(t *testing.T) Source { return cgroupTree(t, "lots 100000") },
			[]string{"cpu.max", `quota "lots"`}},
		{"zero cpu.max period", func(t *testing.T) Source { return cgroupTree(t, "100000 0") },
			[]string{"cpu.max", `period "0"`}},
		{"malformed proc cgroup", func(t *testing.T) Source {
			src := fake("smt", "cgroup_v2_quota", 0)
			src.ProcCgroup = "0::/a\n1:cpu\n"
			return src
		}, []string{`line "1:cpu"`}},
		{"missing proc cgroup file", func(t *testing.T) Source {
			src := fake("smt", "cgroup_v2_quota", 0)
			src.ProcCgroup = filepath.Join(t.TempDir(), "cgroup")
			return src
		}, []string{"reading cgroup membership"}},
		{"v1 quota without period", func(t *testing.T) Source {
			root := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(root, "cpu"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, "cpu", "cpu.cfs_quota_us"), []byte("50000\n"), 0o644))
			src := fake("smt", "", 0)
			src.CgroupRoot, src.ProcCgroup = root, "2:cpu:/\n"
			return src
		}, []string{"cpu.cfs_quota_us but its period is unreadable"}},
		{"v1 quota malformed", func(t *testing.T) Source {
			root := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(root, "cpu,cpuacct"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, "cpu,cpuacct", "cpu.cfs_quota_us"), []byte("0\n"), 0o644))
			src := fake("smt", "", 0)
			src.CgroupRoot, src.ProcCgroup = root, "2:cpu,cpuacct:/\n"
			return src
		}, []string{"cpu.cfs_quota_us", `"0" is neither -1 nor a positive number`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DetectFrom(tc.src(t))
			require.Error(t, err)
			for _, want := range tc.wantErr {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

// TestDetectFromRandomMachines writes random sysfs trees (packages × cores × threads, CPU
// ids shuffled, core_ids repeated on every package, random offline CPUs and cpuset) and
// checks DetectFrom against the machine they were written from.
func TestDetectFromRandomMachines(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 60 {
		packages, coresPer, threads := 1+rng.IntN(3), 1+rng.IntN(4), 1+rng.IntN(3)
		n := packages * coresPer * threads
		ids := rng.Perm(n)
		online := map[int]bool{}
		allowed := map[int]bool{}
		for c := range n {
			online[c] = rng.Float64() < 0.85
			allowed[c] = rng.Float64() < 0.7
		}

		root := t.TempDir()
		write := func(path, contents string) {
			require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, path), []byte(contents+"\n"), 0o644))
		}
		var want Topology
		var onlineList, allowedList []int
		nodeCPUs := map[int][]int{}
		for c := range n {
			if online[c] {
				onlineList = append(onlineList, c)
			}
			if allowed[c] {
				allowedList = append(allowedList, c)
			}
		}
		write("devices/system/cpu/online", FormatCPUList(onlineList))
		for p := range packages {
			for core := range coresPer {
				var siblings []int // online siblings: what sysfs lists
				for th := range threads {
					if c := ids[(p*coresPer+core)*threads+th]; online[c] {
						siblings = append(siblings, c)
					}
				}
				slices.Sort(siblings)
				wantCore := Core{Package: p, CoreID: 10 + core, Node: p}
				for _, c := range siblings {
					dir := fmt.Sprintf("devices/system/cpu/cpu%d/topology/", c)
					write(dir+"physical_package_id", fmt.Sprint(p))
					write(dir+"core_id", fmt.Sprint(10+core))
					write(dir+"thread_siblings_list", FormatCPUList(siblings))
					nodeCPUs[p] = append(nodeCPUs[p], c)
					if allowed[c] {
						wantCore.CPUs = append(wantCore.CPUs, c)
						want.Allowed = append(want.Allowed, c)
					}
				}
				if len(wantCore.CPUs) > 0 {
					wantCore.Key = siblings[0]
					want.Cores = append(want.Cores, wantCore)
				}
			}
		}
		for p, cpus := range nodeCPUs {
			write(fmt.Sprintf("devices/system/node/node%d/cpulist", p), FormatCPUList(cpus))
		}

		got, err := DetectFrom(Source{SysRoot: root, Allowed: allowedList})
		if len(want.Cores) == 0 {
			require.Error(t, err, "trial %d", trial)
			continue
		}
		require.NoError(t, err, "trial %d", trial)
		slices.Sort(want.Allowed)
		slices.SortFunc(want.Cores, func(a, b Core) int { return a.Key - b.Key })
		want.Usable = len(want.Cores)
		assert.Equal(t, want, *got, "trial %d", trial)
	}
}

// TestDetect checks this machine against /proc/self/status Cpus_allowed_list (proc(5))
// and the online CPUs.
func TestDetect(t *testing.T) {
	topo, err := Detect()
	require.NoError(t, err)
	t.Logf("this machine:\n%s", topo)

	status, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	var allowed []int
	for line := range strings.Lines(string(status)) {
		if list, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			allowed, err = ParseCPUList(list)
			require.NoError(t, err)
		}
	}
	require.NotEmpty(t, allowed, "no Cpus_allowed_list in /proc/self/status")
	onlineText, err := os.ReadFile("/sys/devices/system/cpu/online")
	require.NoError(t, err)
	online, err := ParseCPUList(string(onlineText))
	require.NoError(t, err)
	allowed = slices.DeleteFunc(allowed, func(c int) bool { return !slices.Contains(online, c) })
	assert.Equal(t, allowed, topo.Allowed)

	var inCores []int
	for _, c := range topo.Cores {
		require.NotEmpty(t, c.CPUs)
		assert.LessOrEqual(t, c.Key, c.CPUs[0])
		inCores = append(inCores, c.CPUs...)
	}
	slices.Sort(inCores)
	assert.Equal(t, topo.Allowed, inCores, "every allowed CPU in exactly one core")
	assert.GreaterOrEqual(t, topo.Usable, 1)
	assert.LessOrEqual(t, topo.Usable, len(topo.Cores))
	if topo.Quota > 0 {
		assert.GreaterOrEqual(t, float64(topo.Usable), min(topo.Quota, float64(len(topo.Cores))))
	}
}

func TestCoreOf(t *testing.T) {
	topo, err := DetectFrom(fake("two_sockets", "", 1, 2, 6))
	require.NoError(t, err)
	core, ok := topo.CoreOf(6)
	require.True(t, ok)
	assert.Equal(t, Core{Key: 2, Package: 1, CoreID: 0, Node: 1, CPUs: []int{2, 6}}, core)
	core, ok = topo.CoreOf(1)
	require.True(t, ok)
	assert.Equal(t, 1, core.Key)
	_, ok = topo.CoreOf(5) // a sibling of core 1, but not allowed
	assert.False(t, ok)
	_, ok = topo.CoreOf(99)
	assert.False(t, ok)
}

func TestString(t *testing.T) {
	topo, err := DetectFrom(fake("two_sockets", "cgroup_v1_quota", 0, 1, 4, 2, 6, 3))
	require.NoError(t, err)
	quotaFile := filepath.Join("testdata", "cgroup_v1_quota", "cgroup", "cpu,cpuacct", "docker", "cpu.cfs_quota_us")
	assert.Equal(t, `allowed CPUs: 0-4,6 (6 CPUs)
physical cores: 4 (2 of them with SMT siblings)
packages: 2 (ids 0-1)
NUMA nodes: 2 (ids 0-1)
  core 0: CPUs 0,4 (package 0, core_id 0, node 0)
  core 1: CPUs 1 (package 0, core_id 1, node 0)
  core 2: CPUs 2,6 (package 1, core_id 0, node 1)
  core 3: CPUs 3 (package 1, core_id 1, node 1)
CPU quota: 2.5 CPUs (`+quotaFile+`)
usable cores: 3`, topo.String())

	topo, err = DetectFrom(fake("no_topology", "", 0, 1))
	require.NoError(t, err)
	assert.Equal(t, `allowed CPUs: 0-1 (2 CPUs)
physical cores: 2 (0 of them with SMT siblings)
packages: 1 (ids 0)
NUMA nodes: unknown
  core 0: CPUs 0 (package 0, core_id 0, node unknown)
  core 1: CPUs 1 (package 0, core_id 1, node unknown)
CPU quota: none
usable cores: 2`, topo.String())
}
