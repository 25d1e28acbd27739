"""C++ frame names: demangled in Python, spelled exactly as binutils' c++filt spells them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscope.stacks.symbols import Demangler

# Templates, packs, lambdas, operators, conversions, anonymous namespaces,
# member pointers, vtables, guards, clones: no library headers, so any
# C++ compiler builds it.
CASES = r"""
namespace ns { namespace inner {
template <typename T, int N> struct Box {
    T v[N];
    Box operator+(const Box&) const;
    bool operator==(const Box&) const;
    T& operator[](int);
    operator bool() const;
    template <class U> U cast() const;
};
template <typename T, int N> Box<T, N> Box<T, N>::operator+(const Box&) const { return *this; }
template <typename T, int N> bool Box<T, N>::operator==(const Box&) const { return true; }
template <typename T, int N> T& Box<T, N>::operator[](int i) { return v[i]; }
template <typename T, int N> Box<T, N>::operator bool() const { return true; }
template <typename T, int N> template <class U> U Box<T, N>::cast() const { return U(); }
template struct Box<float, 3>;
template struct Box<Box<char, 2>*, 2>;
template double Box<float, 3>::cast<double>() const;
}}
struct Launcher {
    virtual ~Launcher();
    Launcher(int);
    void launch(void (*)(int, float*), const char* const*) volatile;
    static int count;
};
Launcher::~Launcher() {}
Launcher::Launcher(int) {}
void Launcher::launch(void (*)(int, float*), const char* const*) volatile {}
int Launcher::count = 0;
template <typename... Ts> void variadic(Ts&&...) {}
template void variadic<int, const char*, ns::inner::Box<float, 3>&>(int&&, const char*&&, ns::inner::Box<float, 3>&);
// Lambdas in inline functions get Itanium names ({lambda(int, auto:1)#1}), not clang's local $_0.
inline auto make() { int k = 3; return [k](int x, auto y) { return k + x + y; }; }
inline int lambdas() { auto l = make(); auto l2 = [](const char* s) { return *s; }; return l(1, 2) + l(1, 2.0) + l2("a"); }
int use() { return lambdas(); }
namespace { int anon(int (*)(char, ...), int ns::inner::Box<float, 3>::*) { return 0; } }
int callanon() { return anon(nullptr, nullptr); }
void arrays(int (&)[4], unsigned __int128, wchar_t, char16_t, char32_t, long double, decltype(nullptr)) {}
template <class T> auto dec(T t) -> decltype(t + 1) { return t + 1; }
template auto dec<int>(int) -> decltype(1 + 1);
struct Op {
    Op& operator<<(int);
    Op& operator()(int, int);
    bool operator<=(const Op&) const;
    Op& operator--();
    void operator delete[](void*);
};
Op& Op::operator<<(int) { return *this; }
Op& Op::operator()(int, int) { return *this; }
bool Op::operator<=(const Op&) const { return true; }
Op& Op::operator--() { return *this; }
void Op::operator delete[](void*) {}
int guarded(int x) { static int s = x * 2; return s; }
"""


def _defined_names(path: Path, *flags: str) -> list[str]:
    out = subprocess.run(["nm", *flags, "--defined-only", str(path)], capture_output=True, text=True, check=True)
    # `nm -D` appends the symbol version (`@@GLIBCXX_3.4`); symbol tables hold the name alone.
    return [line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.split()]


def _cxxfilt(names: list[str]) -> list[str]:
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Mangled names of the system's libstdc++ and of a compiled C++ file."""
    tmp = tmp_path_factory.mktemp("demangle")
    (tmp / "cases.cpp").write_text(CASES)
    subprocess.run(
        ["clang++", "-std=c++17", "-O0", "-c", str(tmp / "cases.cpp"), "-o", str(tmp / "cases.o")], check=True
    )
    libstdcxx = sorted(Path("/usr/lib").glob("*/libstdc++.so.6"))
    assert libstdcxx, "no libstdc++.so.6 under /usr/lib/<triplet>/"
    names = _defined_names(tmp / "cases.o") + _defined_names(libstdcxx[0], "-D")
    mangled = sorted({n for n in names if n.startswith("_Z")})
    assert len(mangled) > 1000
    return mangled


def test_names_are_spelled_as_cxxfilt_spells_them(corpus: list[str]) -> None:
    # given libstdc++'s exported names and those of templates, lambdas and operators
    expected = dict(zip(corpus, _cxxfilt(corpus), strict=True))
    # when gpuscope demangles them
    got = Demangler().demangle(corpus)
    # then every one reads as c++filt writes it
    differ = {n: (got[n], expected[n]) for n in corpus if got[n] != expected[n]}
    assert differ == {}
    plus = "ns::inner::Box<float, 3>::operator+(ns::inner::Box<float, 3> const&) const"
    assert got["_ZNK2ns5inner3BoxIfLi3EEplERKS2_"] == plus
    assert "auto make()::{lambda(int, auto:1)#1}::operator()<int>(int, int) const" in got.values()


def test_a_name_that_is_not_mangled_cxx_comes_back_unchanged() -> None:
    names = ["main", "cudaMalloc", "_Zbogus", "_Z", "", "_RNvCs1234_7mycrate4main", "_ZN5torch8autograd4callEv"]
    got = Demangler().demangle(names)
    assert got == {**{n: n for n in names}, "_ZN5torch8autograd4callEv": "torch::autograd::call()"}


def test_each_name_is_demangled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = pytest.importorskip("demangle", reason="the demangle package needs Python 3.11")
    seen: list[str] = []
    real = pkg.demangle

    def counting(name: str, **kw: str) -> str:
        seen.append(name)
        return str(real(name, **kw))

    monkeypatch.setattr(pkg, "demangle", counting)
    d = Demangler()
    first = d.demangle(["_ZN5torch8autograd4callEv", "_ZN5torch8autograd4callEv", "main"])
    again = d.demangle(["_ZN5torch8autograd4callEv"])
    assert seen == ["_ZN5torch8autograd4callEv"]
    assert first["_ZN5torch8autograd4callEv"] == again["_ZN5torch8autograd4callEv"] == "torch::autograd::call()"


def test_without_the_package_cxxfilt_demangles(monkeypatch: pytest.MonkeyPatch, corpus: list[str]) -> None:
    # Python 3.10, where the demangle package does not install, falls back to c++filt
    monkeypatch.setitem(sys.modules, "demangle", None)  # `import demangle` raises ImportError
    assert shutil.which("c++filt"), "binutils' c++filt (make setup installs it)"
    sample = corpus[::50]
    assert Demangler().demangle(sample) == dict(zip(sample, _cxxfilt(sample), strict=True))
