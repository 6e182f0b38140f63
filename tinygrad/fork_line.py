"""Which upstream line this tinygrad is: 0.14.0, the default, or 0.12.0, the frozen line (the seeds' design, VMAPIN/VMAPOUT through
rangeify). The one place the fork's code, tests, bench and examples tell the lines apart: `grep -rn LINE_012` finds every place where
they differ (docs/internals.md, "The two lines")."""
from tinygrad.uop.ops import AxisType

LINE = "0.12.0" if hasattr(AxisType, "OUTER") else "0.14.0"   # upstream removed the OUTER range in 0.13
LINE_012 = LINE == "0.12.0"
