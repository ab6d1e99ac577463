//! The Python program the preflight runs to find modules without importing them, on the
//! host (`python`) and inside a container image (`container`).

/// The small program the interpreter runs: exit 3 and `MODULE<tab>WHY` for the first of
/// its arguments it cannot find, 0 when it finds them all. Nothing is imported but
/// `importlib.util` (and the parents of a dotted name, which is never given).
pub(super) const FIND_MODULES: &str = "import importlib.util, sys\n\
for m in sys.argv[1:]:\n    \
try:\n        \
found, why = importlib.util.find_spec(m) is not None, 'no module named ' + m\n    \
except Exception as e:\n        \
found, why = False, '%s: %s' % (type(e).__name__, e)\n    \
if not found:\n        \
print(m + '\\t' + why)\n        \
sys.exit(3)\n";
