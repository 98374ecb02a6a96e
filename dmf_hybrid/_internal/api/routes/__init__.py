"""One router per resource; ``dmf_hybrid._internal.api.app.ROUTERS`` lists the ones the app serves.
"""
