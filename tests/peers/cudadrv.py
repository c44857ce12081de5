"""numba-cuda's driver tests (numba.cuda.tests.cudadrv) less a deselect list,
with one outcome per test written to a file (tests/peers/README.md).

usage: cudadrv.py DESELECT_LIST OUTCOMES

numba's own loader (the package's load_tests) finds the tests, as
`python -m numba.runtests numba.cuda.tests.cudadrv` does; pytest cannot import
them from the wheel (it names the modules cuda.tests.*, which the spawned
children of test_init then fail to import). OUTCOMES gets one line per test
that ran: "<test id> <pass|fail|error|skip|xfail|xpass>", and a last line
"# done", so that a run cut short cannot pass for a complete one. Exits 0 when
the run completed, whatever the outcomes (comparing them is the caller's
work); 2 when a deselected test is not in the suite (the list went stale).
"""
import sys
import unittest

SUITE = "numba.cuda.tests.cudadrv"


def read_deselect(path):
    """The test ids of the list: one per line, "# ..." comments after it."""
    ids = set()
    with open(path) as f:
        for line in f:
            test_id = line.split("#", 1)[0].strip()
            if test_id:
                ids.add(test_id)
    return ids


def flatten(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from flatten(test)
        else:
            yield test


def short_id(test):
    """numba.cuda.tests.cudadrv.test_x.Class.test_y -> test_x.Class.test_y"""
    return test.id().removeprefix(SUITE + ".")


class OutcomeResult(unittest.TextTestResult):
    """A verbose text result that also records each test's outcome."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}

    def _record(self, test, outcome):
        # A test with subtests records its worst: a failing subtest fails it.
        test_id = short_id(getattr(test, "test_case", test))
        if self.outcomes.get(test_id) in ("fail", "error"):
            return
        self.outcomes[test_id] = outcome

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "fail")

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skip")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "xfail")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "xpass")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._record(test, "fail" if failed else "error")


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    deselect = read_deselect(argv[1])
    tests = list(flatten(unittest.defaultTestLoader.loadTestsFromName(SUITE)))
    stale = sorted(deselect - {short_id(t) for t in tests})
    if stale:
        print("deselected but not in %s: %s" % (SUITE, ", ".join(stale)), file=sys.stderr)
        return 2
    chosen = unittest.TestSuite(t for t in tests if short_id(t) not in deselect)
    print("%d tests, %d deselected" % (chosen.countTestCases(), len(deselect)), flush=True)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=OutcomeResult)
    result = runner.run(chosen)
    with open(argv[2], "w") as f:
        for test_id, outcome in sorted(result.outcomes.items()):
            f.write("%s %s\n" % (test_id, outcome))
        f.write("# done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
