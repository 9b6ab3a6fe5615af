"""tg_shape: movement ops as index maths. View and ShapeTracker.

>>> from tg_shape import ShapeTracker
>>> ShapeTracker.from_shape((2, 3)).permute((1, 0)).shape
(3, 2)
"""

from tg_shape.shapetracker import ShapeTracker
from tg_shape.view import View, strides_for_shape

__version__ = "0.1.0"
__all__ = ["ShapeTracker", "View", "strides_for_shape"]
