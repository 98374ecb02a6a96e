"""One router per resource; ``dmf_hybrid.api.app.ROUTERS`` lists the ones the app serves."""
