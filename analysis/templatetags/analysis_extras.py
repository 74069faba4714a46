from django import template

register = template.Library()


@register.filter
def x100(value):
    """A correlation in [-1, 1] shown x 100 with one decimal, as papers report them; n/a for None."""
    if value is None or value == "":
        return "n/a"
    return f"{100 * float(value):.1f}"


@register.filter
def get(mapping, key):
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.filter
def split(value, sep=None):
    """Split a string (on whitespace by default), for loops over literal lists in templates."""
    return str(value).split(sep)
