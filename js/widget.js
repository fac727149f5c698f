// anywidget front end: the view over the `packed` (report) / `tab` / `selected` traits.

import { render as renderView } from "./render.js";

function render({ model, el }) {
  let view = null;
  const mount = () => {
    view?.destroy();
    view = renderView(el, model.get("packed"), {
      tab: model.get("tab"),
      selected: model.get("selected"),
      onTab: (tab) => { model.set("tab", tab); model.save_changes(); },
      onSelect: (sel) => { model.set("selected", sel); model.save_changes(); },
    });
    view.ready.catch(() => {});
  };
  mount();
  const onSelected = () => view.select(model.get("selected"));
  const onTab = () => view.setTab(model.get("tab"));
  model.on("change:selected", onSelected);
  model.on("change:tab", onTab);
  model.on("change:packed", mount);
  return () => {
    model.off("change:selected", onSelected);
    model.off("change:tab", onTab);
    model.off("change:packed", mount);
    view?.destroy();
  };
}

export default { render };
